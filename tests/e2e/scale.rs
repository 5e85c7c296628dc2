//! Many objects at once: 100 ModelServices all converge.

use std::time::Duration;

use futures::future::join_all;
use modelservice_operator::api::ModelService;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_modelservices_converge() {
    let env = Env::new().await;
    let _op = env.operator().start();
    let names: Vec<String> = (0..100).map(|i| format!("m{i:03}")).collect();
    join_all(names.iter().map(|n| env.apply_ms(n, cpu_spec()))).await;

    let serving = pods_can_serve("a_hundred_modelservices_converge");
    let done = wait_for(
        "all 100 ModelServices to converge",
        Duration::from_secs(180),
        || async {
            let list = env
                .api::<ModelService>()
                .list(&Default::default())
                .await
                .ok()?;
            let ok = list
                .items
                .iter()
                .filter(|ms| {
                    observed_current(ms)
                        && (!serving || condition(ms, "Ready").is_some_and(|(s, _)| s == "True"))
                })
                .count();
            (ok == 100).then_some(ok)
        },
    )
    .await;
    assert_eq!(done, 100);
    env.finish().await;
}

/// `--max-requests-in-flight 1`, and the API server holds the one request
/// in flight (a Service's apply): everything else the operator has to send
/// waits in the operator, counted, and reaches the server only when that
/// one is answered; then every model converges, so no request ever waits
/// for a place that a request behind it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_bound_wait_their_turn() {
    if !needs_fake("requests_past_the_bound_wait_their_turn") {
        return;
    }
    use fake_apiserver::Verb;
    fn sent(env: &Env) -> u64 {
        operator_requests(env)
            .iter()
            .filter(|((verb, _), _)| *verb != Verb::Watch)
            .map(|(_, n)| n)
            .sum()
    }
    let env = Env::new().await;
    let fake = env.fake();
    fake.hold(Verb::Patch, "services");
    let op = env
        .operator()
        .arg("--max-requests-in-flight")
        .arg("1")
        .start();
    let names: Vec<String> = (0..4).map(|i| format!("bound{i}")).collect();
    join_all(names.iter().map(|n| env.apply_ms(n, cpu_spec()))).await;
    let waiting = "modelservice_api_requests_waiting";
    wait_for("requests waiting behind the held one", CONVERGE, || async {
        let held = operator_requests(&env).get(Verb::Patch, "services") >= 1;
        (held && op.metric(waiting).unwrap_or(0.0) >= 1.0).then_some(())
    })
    .await;
    let before = sent(&env);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sent(&env), before, "nothing passes a full bound");
    fake.release(Verb::Patch, "services");
    for n in &names {
        wait_ms(
            &env,
            n,
            "its status for the current generation",
            CONVERGE,
            observed_current,
        )
        .await;
    }
    wait_for("none left waiting", CONVERGE, || async {
        (op.metric(waiting) == Some(0.0)).then_some(())
    })
    .await;
    env.finish().await;
}
