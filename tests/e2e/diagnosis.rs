//! Status that explains itself: GPU shortage and image pull failures are
//! named, announced once, and cleared when the cause goes away.

use serde_json::json;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_shortage_is_named_announced_once_and_clears_by_itself() {
    let env = Env::new().await;
    let _op = env.operator().arg("--resync-period").arg("1s").start();
    // 16 GPUs per replica: more than any node has (8 on the simulator, 0 on kind).
    env.apply_ms("big", json!({"model": "meta-llama/Llama-3.1-405B-Instruct", "image": serving_image(), "gpus": 16})).await;
    let ms = wait_ms(&env, "big", "InsufficientGPU", CONVERGE, |ms| {
        condition(ms, "Degraded") == Some(("True".into(), "InsufficientGPU".into()))
    })
    .await;
    assert_eq!(
        condition(&ms, "Ready"),
        Some(("False".into(), "InsufficientGPU".into()))
    );
    let msg = message(&ms, "Degraded");
    assert!(
        msg.contains("Insufficient nvidia.com/gpu"),
        "the scheduler is quoted: {msg}"
    );
    assert!(
        msg.contains("16 free nvidia.com/gpu"),
        "the request is stated: {msg}"
    );

    // Several reconciles later, still exactly one event for this cause.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    assert_eq!(
        warnings(&env, "big", "InsufficientGPU").await,
        1,
        "one event per cause, not per reconcile"
    );

    // A node pool that autoscales: the scheduler's message changes with the
    // node count, the cause does not. One Event per cause means per reason.
    env.a_node_joins_and_leaves(std::time::Duration::from_secs(4))
        .await;
    wait_ms(
        &env,
        "big",
        "the message to follow the node count",
        CONVERGE,
        |ms| message(ms, "Degraded").contains("Insufficient nvidia.com/gpu"),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    assert_eq!(
        warnings(&env, "big", "InsufficientGPU").await,
        1,
        "a node that joined and left is not a new cause"
    );

    let Some(sim) = env.sim.as_ref() else {
        eprintln!("SKIPPED recovery part: a real cluster's GPUs cannot be added by the test");
        return env.finish().await;
    };
    sim.set_gpus_per_node(16);
    let ms = wait_ready(&env, "big").await;
    assert_eq!(
        condition(&ms, "Degraded"),
        Some(("False".into(), "AsExpected".into()))
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_pull_failure_is_named_and_clears_when_fixed() {
    let env = Env::new().await;
    let op = env.operator().start();
    let mut spec = cpu_spec();
    spec["image"] = json!("registry.invalid/no/such-image:does-not-exist");
    env.apply_ms("pull", spec.clone()).await;
    let said = wait_ms(&env, "pull", "ImagePullFailed", CONVERGE * 2, |ms| {
        condition(ms, "Degraded") == Some(("True".into(), "ImagePullFailed".into()))
    });
    let Ok(ms) = tokio::time::timeout(CONVERGE, said).await else {
        let last = get_ms(&env, "pull").await.map(|ms| ms.status);
        panic!(
            "no ImagePullFailed within {CONVERGE:?}; status {last:?}; the operator's log:\n{}",
            op.logs()
        );
    };
    assert!(message(&ms, "Degraded").contains("registry.invalid/no/such-image:does-not-exist"));
    wait_for("the ImagePullFailed event", CONVERGE, || async {
        (warnings(&env, "pull", "ImagePullFailed").await == 1).then_some(())
    })
    .await;

    if pods_can_serve("an_image_pull_failure_is_named_and_clears_when_fixed") {
        env.apply_ms("pull", cpu_spec()).await;
        let ms = wait_ready(&env, "pull").await;
        assert_eq!(
            condition(&ms, "Degraded"),
            Some(("False".into(), "AsExpected".into()))
        );
    }
    env.finish().await;
}

/// A burst that outruns the API server: event creates are held while a
/// dozen models announce their cause, so the events queue fills past its
/// bound (2 here; 1,000 by default); once the server takes events again,
/// every model has its announcement, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_events_queue_delays_announcements_and_loses_none() {
    if !needs_fake("a_full_events_queue_delays_announcements_and_loses_none") {
        return;
    }
    const MODELS: usize = 12;
    let env = Env::new().await;
    let fake = env.fake();
    fake.hold(fake_apiserver::Verb::Create, "events");
    let op = env.operator().arg("--events-queue").arg("2").start();
    let names: Vec<String> = (0..MODELS).map(|i| format!("burst{i:02}")).collect();
    futures::future::join_all(names.iter().map(|n| {
        env.apply_ms(
            n,
            json!({"model": "meta-llama/Llama-3.1-405B-Instruct", "image": serving_image(), "gpus": 16}),
        )
    }))
    .await;
    for n in &names {
        wait_ms(&env, n, "InsufficientGPU", CONVERGE, |ms| {
            condition(ms, "Degraded") == Some(("True".into(), "InsufficientGPU".into()))
        })
        .await;
    }
    // 4 publishers hold one event each, 2 are in line: the rest wait.
    let delayed = r#"modelservice_events_total{result="delayed"}"#;
    wait_for("the queue to overflow", CONVERGE, || async {
        (op.metric(delayed).unwrap_or(0.0) >= (MODELS - 6) as f64).then_some(())
    })
    .await;
    fake.release(fake_apiserver::Verb::Create, "events");
    let published = r#"modelservice_events_total{result="published"}"#;
    wait_for("every announcement published", CONVERGE, || async {
        (op.metric(published).unwrap_or(0.0) >= MODELS as f64).then_some(())
    })
    .await;
    // Later reconciles announce nothing again.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for n in &names {
        assert_eq!(
            warnings(&env, n, "InsufficientGPU").await,
            1,
            "{n}: one Event for its cause, however full the queue was"
        );
    }
    env.finish().await;
}
