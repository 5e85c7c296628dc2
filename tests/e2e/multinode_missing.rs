//! A cluster without LeaderWorkerSet: a ModelService whose replicas are
//! groups says so in its status (Ready False and Degraded, reason
//! MultiNodeUnavailable), writes nothing of a spec that cannot run, retries
//! at the discovery's pace only, and once the CRD is installed it runs.
//!
//! On a real cluster this removes the cluster-wide LeaderWorkerSet CRD, so
//! CI runs it alone (like `route_missing::`).

use serde_json::json;

use crate::harness::{CONVERGE, Env, real_cluster, wait_for};
use crate::lws::{LwsController, lws_api};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leaderworkerset_groups_give_a_reason_and_recover_when_it_comes() {
    let env = Env::new().await;
    env.remove_lws_crd().await;
    let op = env.operator().arg("--discovery-interval").arg("1s").start();
    let name = "nolws";
    let spec = json!({"model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
        "runtime": {"image": serving_image(), "preset": "vllm"},
        "resources": {"gpus": 1}, "replicas": 1, "parallelism": {"pipeline": 2}});
    env.apply_ms_v1(name, spec).await;

    let ms = wait_ms(
        &env,
        name,
        "Degraded MultiNodeUnavailable",
        CONVERGE,
        |ms| condition(ms, "Degraded") == Some(("True".into(), "MultiNodeUnavailable".into())),
    )
    .await;
    assert_eq!(
        condition(&ms, "Ready"),
        Some(("False".into(), "MultiNodeUnavailable".into()))
    );
    let m = message(&ms, "Degraded");
    assert!(
        m.contains("LeaderWorkerSet") && m.contains("pipeline is 2"),
        "{m}"
    );
    // Nothing of a spec that cannot run: no Deployment in its place.
    assert!(deployment(&env, name).await.is_none());
    if !real_cluster() {
        let calls = calls(&operator_requests(&env));
        assert!(
            !calls.iter().any(|(_, r)| r.contains("leaderworkersets")),
            "requests for an API the cluster does not serve: {calls:?}"
        );
        assert!(
            !calls
                .iter()
                .any(|(v, r)| v != "get" && v != "list" && v != "watch" && r == "services"),
            "a Service for a spec that cannot run: {calls:?}"
        );
    }

    env.install_lws_crd().await;
    let _lws = LwsController::start(&env);
    wait_for("the LeaderWorkerSet", CONVERGE, || async {
        lws_api(&env.client, &env.namespace)
            .get_opt(name)
            .await
            .ok()
            .flatten()
    })
    .await;
    wait_ready(&env, name).await;
    let ms = get_ms(&env, name).await.expect("the ModelService");
    assert_eq!(
        condition(&ms, "Degraded").map(|c| c.0),
        Some("False".into())
    );
    drop(op);
    env.finish().await;
}
