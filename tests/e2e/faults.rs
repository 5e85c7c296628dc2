//! Faults end in convergence: dropped watches, a paused or restarted API
//! server, injected 409s and 500s.

use std::time::Duration;

use fake_apiserver::{FailRule, Verb};
use serde_json::json;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

async fn converged_on_args(env: &Env, name: &str, arg: &str) {
    wait_ms(
        env,
        name,
        "the current generation observed",
        CONVERGE,
        |_| true,
    )
    .await;
    wait_for(
        &format!("the Deployment to carry {arg}"),
        CONVERGE,
        || async {
            let d = deployment(env, name).await?;
            d.spec.template.spec.as_ref()?.containers[0]
                .args
                .as_ref()?
                .iter()
                .any(|a| a == arg)
                .then_some(())
        },
    )
    .await;
}

fn spec_with(arg: &str) -> serde_json::Value {
    let mut s = cpu_spec();
    s["args"] = json!([arg]);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_server_errors_and_conflicts_end_in_convergence() {
    if !needs_fake("injected_server_errors_and_conflicts_end_in_convergence") {
        return;
    }
    let env = Env::new().await;
    env.apply_ms("flaky", spec_with("--a")).await;
    let fake = env.fake();
    fake.fail_next(FailRule {
        verb: Some(Verb::Patch),
        resource: Some("deployments".into()),
        code: 500,
        times: 3,
    });
    fake.fail_next(FailRule {
        verb: Some(Verb::Patch),
        resource: Some("modelservices/status".into()),
        code: 409,
        times: 3,
    });
    fake.fail_next(FailRule {
        verb: Some(Verb::Patch),
        resource: Some("modelservices".into()),
        code: 500,
        times: 2,
    });
    let _op = env.operator().start();
    converged_on_args(&env, "flaky", "--a").await;
    wait_ready(&env, "flaky").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_and_restarts_are_survived() {
    if !needs_fake("dropped_watches_and_restarts_are_survived") {
        return;
    }
    let env = Env::new().await;
    let op = env.operator().start();
    op.ready().await;
    env.apply_ms("w", spec_with("--one")).await;
    converged_on_args(&env, "w", "--one").await;

    env.fake().drop_watches();
    env.apply_ms("w", spec_with("--two")).await;
    converged_on_args(&env, "w", "--two").await;

    // A restart compacts history: watchers must relist (410 Gone) and carry on.
    env.fake().restart();
    env.apply_ms("w", spec_with("--three")).await;
    converged_on_args(&env, "w", "--three").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_api_server_is_waited_out() {
    if !needs_fake("a_paused_api_server_is_waited_out") {
        return;
    }
    let env = Env::new().await;
    let op = env.operator().start();
    op.ready().await;
    env.apply_ms("p", spec_with("--before")).await;
    converged_on_args(&env, "p", "--before").await;

    env.fake().pause();
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.fake().resume();
    env.apply_ms("p", spec_with("--after")).await;
    converged_on_args(&env, "p", "--after").await;
    wait_ready(&env, "p").await;
}

/// The per-object error backoff starts again after a success. Before, the
/// count of failures only grew over an object's life: after seven transient
/// errors and a recovery, the next two waited 12.8 s and 25.6 s (and after a
/// dozen, 5 minutes each) instead of 100 ms and 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_error_backoff_starts_again_after_a_success() {
    if !needs_fake("the_error_backoff_starts_again_after_a_success") {
        return;
    }
    let env = Env::new().await;
    let fake = env.fake();
    let fail_deployment_applies = |times| {
        fake.fail_next(FailRule {
            verb: Some(Verb::Patch),
            resource: Some("deployments".into()),
            code: 500,
            times,
        })
    };
    // Seven failures in a row: 100 ms doubling, 12.7 s in all, then success.
    fail_deployment_applies(7);
    let op = env.operator().start();
    env.apply_ms("b", spec_with("--first")).await;
    wait_for(
        "the Deployment after seven failures",
        Duration::from_secs(90),
        || async {
            let d = deployment(&env, "b").await?;
            d.spec.template.spec?.containers[0]
                .args
                .as_ref()?
                .iter()
                .any(|a| a == "--first")
                .then_some(())
        },
    )
    .await;
    wait_ms(&env, "b", "the first generation observed", CONVERGE, |_| {
        true
    })
    .await;

    // Two more, on the next change: retried after 100 and 200 ms. (Two, so
    // that a stray trigger, which retries at once, cannot hide the backoff.)
    fail_deployment_applies(2);
    env.apply_ms("b", spec_with("--second")).await;
    wait_for(
        "the next change to recover from two failures at once",
        Duration::from_secs(5),
        || async {
            let d = deployment(&env, "b").await?;
            d.spec.template.spec?.containers[0]
                .args
                .as_ref()?
                .iter()
                .any(|a| a == "--second")
                .then_some(())
        },
    )
    .await;
    drop(op);
}

/// A model whose applies keep failing must not read as healthy: from the
/// third failure in a row, status says what fails (Degraded
/// `ReconcileFailed`), and further retries of the same failure write no
/// status. Fake only: it needs injected failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applies_that_keep_failing_are_said_in_status_once() {
    if !needs_fake("applies_that_keep_failing_are_said_in_status_once") {
        return;
    }
    let env = Env::new().await;
    let fake = env.fake();
    // 100 ms doubling: the seventh failure comes about 6 s after the first.
    fake.fail_next(FailRule {
        verb: Some(Verb::Patch),
        resource: Some("deployments".into()),
        code: 500,
        times: 8,
    });
    let op = env.operator().start();
    env.apply_ms("failing", spec_with("--a")).await;
    let ms = wait_ms(
        &env,
        "failing",
        "Degraded ReconcileFailed",
        CONVERGE,
        |ms| condition(ms, "Degraded") == Some(("True".into(), "ReconcileFailed".into())),
    )
    .await;
    let said = message(&ms, "Degraded");
    assert!(
        said.contains("Deployment") && said.ends_with("; retrying"),
        "{said}"
    );
    assert_eq!(condition(&ms, "Ready").map(|c| c.0), Some("False".into()));
    let writes = || operator_requests(&env).get(Verb::Patch, "modelservices/status");
    let then = writes();
    // Two more retries of the same failure (0.8 s and 1.6 s apart).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = wait_ms(&env, "failing", "still failing", CONVERGE, |_| true).await;
    if condition(&still, "Degraded").map(|c| c.1) == Some("ReconcileFailed".into()) {
        assert_eq!(writes(), then, "a retry of the same failure wrote status");
    }
    // And it recovers by itself.
    wait_ready(&env, "failing").await;
    drop(op);
}
