//! A cluster without KEDA: a ModelService that asks for it says so in its
//! status, the operator neither crashes nor retries hot, and once the CRD is
//! installed the ScaledObject appears and the reason clears by itself.
//!
//! On a real cluster this removes the cluster-wide KEDA CRD, so CI runs it
//! alone (like `outage::`).

use std::time::Duration;

use crate::harness::{CONVERGE, Env, real_cluster, wait_for};
use crate::keda::{keda, keda_spec, scaled_object};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_keda_crd_the_status_says_so_and_installing_it_recovers() {
    let env = Env::new().await;
    env.remove_keda_crd().await;
    let op = env.operator().arg("--discovery-interval").arg("1s").start();
    let name = "nokeda";
    env.apply_ms_v1(name, keda_spec(2, keda(1, 4))).await;

    let ms = wait_ms(
        &env,
        name,
        "Degraded AutoscalerUnavailable",
        CONVERGE,
        |ms| condition(ms, "Degraded") == Some(("True".into(), "AutoscalerUnavailable".into())),
    )
    .await;
    assert!(
        message(&ms, "Degraded").contains("KEDA"),
        "{}",
        message(&ms, "Degraded")
    );
    // The model itself is served, at the size it has.
    wait_for("the Deployment", CONVERGE, || deployment(&env, name)).await;
    op.ready().await;

    // No hot loop: over a few discovery rounds, reconciles stay few.
    let before = op.metric("modelservice_reconcile_total").unwrap_or(0.0);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = op.metric("modelservice_reconcile_total").unwrap_or(0.0);
    assert!(
        after - before <= 2.0,
        "{} reconciles in 4 s without KEDA",
        after - before
    );
    if !real_cluster() {
        let calls = calls(&operator_requests(&env));
        assert!(
            !calls.iter().any(|(_, r)| r.contains("scaledobjects")),
            "requests for an API the cluster does not serve: {calls:?}"
        );
    }

    env.install_keda_crd().await;
    wait_for("the ScaledObject once KEDA is installed", CONVERGE, || {
        scaled_object(&env, name)
    })
    .await;
    let ms = wait_ms(&env, name, "the Degraded reason to clear", CONVERGE, |ms| {
        condition(ms, "Degraded").map(|c| c.1) != Some("AutoscalerUnavailable".into())
    })
    .await;
    assert_eq!(
        ms.status
            .as_ref()
            .and_then(|s| s.autoscaler.as_ref())
            .map(|a| a.engine.clone()),
        Some("KEDA".into())
    );
    env.finish().await;
}

/// Discovery is a prediction too: KEDA's CRD deleted while a ModelService
/// scales with it. Before, every apply and the watch failed with 404 while
/// status said `Ready=True Available, Degraded=False`, until the next
/// discovery (30 s). Now a 404 refutes the discovery at once: with
/// discovery once in 10 minutes, status must still say so within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keda_crd_deleted_under_a_model_is_said_at_once_not_at_the_next_discovery() {
    let env = Env::new().await;
    env.install_keda_crd().await;
    let op = env
        .operator()
        .arg("--discovery-interval")
        .arg("10m")
        .start();
    let name = "kedagone";
    env.apply_ms_v1(name, keda_spec(1, keda(1, 4))).await;
    wait_for("the ScaledObject", CONVERGE, || scaled_object(&env, name)).await;
    wait_ms(&env, name, "Degraded=False", CONVERGE, |ms| {
        condition(ms, "Degraded").map(|c| c.0) == Some("False".into())
    })
    .await;

    let removed = std::time::Instant::now();
    env.remove_keda_crd().await;
    let said = wait_ms(
        &env,
        name,
        "Degraded AutoscalerUnavailable",
        CONVERGE * 2,
        |ms| condition(ms, "Degraded") == Some(("True".into(), "AutoscalerUnavailable".into())),
    );
    let Ok(ms) = tokio::time::timeout(CONVERGE, said).await else {
        panic!(
            "no AutoscalerUnavailable within {CONVERGE:?}; the operator's log:\n{}",
            op.logs()
        );
    };
    eprintln!(
        "status said AutoscalerUnavailable {:.1} s after the CRD was removed",
        removed.elapsed().as_secs_f64()
    );
    assert!(
        message(&ms, "Degraded").contains("KEDA"),
        "{}",
        message(&ms, "Degraded")
    );
    // Put KEDA back for whatever runs next on this cluster.
    env.install_keda_crd().await;
    env.finish().await;
}
