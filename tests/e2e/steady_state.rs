//! No write storm: a converged operator sends no write requests, even across
//! several resyncs.

use std::time::Duration;

use crate::harness::Env;
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converged_operator_makes_no_writes_across_resyncs() {
    if !needs_fake("a_converged_operator_makes_no_writes_across_resyncs") {
        return;
    }
    let env = Env::new().await;
    let op = env.operator().arg("--resync-period").arg("1s").start();
    env.apply_ms("calm", cpu_spec()).await;
    let mut spec = cpu_spec();
    spec["autoscaling"] = serde_json::json!({"maxReplicas": 3});
    env.apply_ms("calm-auto", spec).await;
    // An InferencePool, its endpoint picker (Deployment, Service,
    // ServiceAccount, Role, RoleBinding, ConfigMap) and a canary's pool:
    // kinds whose fields live outside `spec` are compared too.
    env.install_gateway_crd().await;
    env.install_pool_crd().await;
    env.apply_ms_v1(
        "calm-pool",
        serde_json::json!({"model": {"name": "m"}, "runtime": {"image": serving_image()},
            "resources": {"gpus": 0},
            "rollout": {"canary": {"runtime": {"image": format!("{}-canary", serving_image())}}},
            "route": {"parentRefs": [{"name": "gw"}], "backend": "InferencePool"}}),
    )
    .await;
    // Groups on a LeaderWorkerSet, its leaders-only Service and its HPA.
    env.install_lws_crd().await;
    let _lws = crate::lws::LwsController::start(&env);
    env.apply_ms_v1(
        "calm-groups",
        serde_json::json!({"model": {"name": "m"}, "runtime": {"image": serving_image()},
            "resources": {"gpus": 1}, "parallelism": {"pipeline": 2},
            "autoscaling": {"maxReplicas": 2}}),
    )
    .await;
    // Weights from a cache: the claim and a Job that completed, whose
    // completion is read once, not on every resync.
    env.apply_ms_v1(
        "calm-cached",
        serde_json::json!({"model": {"name": "m", "source": {"uri": crate::weights::source("rev1")},
            "cache": {"size": "1Gi"}},
            "runtime": {"image": serving_image()}, "resources": {"gpus": 0}}),
    )
    .await;
    let job = crate::weights::the_job(&env, "calm-cached", "rev1").await;
    crate::weights::play_end(
        &env,
        &crate::weights::job_name(&job),
        serde_json::json!({"result": "Complete", "totalBytes": 1024, "files": 1, "downloadedBytes": 1024}),
        false,
    )
    .await;
    wait_ready(&env, "calm-cached").await;
    wait_ready(&env, "calm").await;
    wait_ready(&env, "calm-groups").await;
    wait_ready(&env, "calm-auto").await;
    wait_ready(&env, "calm-pool").await;
    // Let in-flight events (our own status write, the simulator's last
    // status) settle, then count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = operator_requests(&env);
    let reconciles_before = op
        .metric("modelservice_reconcile_total{result=\"success\"}")
        .unwrap_or(0.0);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = operator_requests(&env);
    let reconciles_after = op
        .metric("modelservice_reconcile_total{result=\"success\"}")
        .unwrap_or(0.0);

    assert!(
        reconciles_after >= reconciles_before + 4.0,
        "expected several resync reconciles in 5 s, saw {reconciles_before} -> {reconciles_after}"
    );
    let window = after.since(&before);
    let wrote = writes(&window);
    assert!(wrote.is_empty(), "a converged operator wrote: {wrote:?}");
    let pod_reads: Vec<_> = calls(&window)
        .into_iter()
        .filter(|(_, r)| r.starts_with("pods"))
        .collect();
    assert!(
        pod_reads.is_empty(),
        "a complete download is not read again: {pod_reads:?}"
    );
}
