//! A cluster without Gateway API: a ModelService with a route says so in
//! its status, everything else (the canary included) works, and once the
//! CRD is installed the HTTPRoute appears and the reason clears by itself.
//!
//! On a real cluster this removes the cluster-wide HTTPRoute CRD, so CI runs
//! it alone (like `keda_missing::`).

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::json;

use crate::harness::{CONVERGE, Env, real_cluster, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_gateway_api_a_route_gives_a_reason_and_everything_else_works() {
    let env = Env::new().await;
    env.remove_gateway_crd().await;
    let _op = env.operator().arg("--discovery-interval").arg("1s").start();
    let name = "noroute";
    let spec = json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "runtime": {"image": serving_image()}, "resources": {"gpus": 0}, "replicas": 1,
        "rollout": {"canary": {"runtime": {"image": format!("{}-canary", serving_image())}}},
        "route": {"parentRefs": [{"name": "gateway"}]}});
    env.apply_ms_v1(name, spec).await;

    let ms = wait_ms(&env, name, "Degraded RouteUnavailable", CONVERGE, |ms| {
        condition(ms, "Degraded") == Some(("True".into(), "RouteUnavailable".into()))
    })
    .await;
    assert!(
        message(&ms, "Degraded").contains("Gateway API"),
        "{}",
        message(&ms, "Degraded")
    );
    let route = ms
        .status
        .as_ref()
        .and_then(|s| s.route.clone())
        .expect("route status");
    assert!(route.message.is_some_and(|m| m.contains("Gateway API")));
    // The model is served, canary included.
    wait_for("the canary Deployment", CONVERGE, || async {
        env.api::<Deployment>()
            .get_opt("noroute-canary")
            .await
            .ok()
            .flatten()
    })
    .await;
    if pods_can_serve("route missing") {
        wait_ms(&env, name, "Ready", CONVERGE, |ms| {
            condition(ms, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
    }
    if !real_cluster() {
        let calls = calls(&operator_requests(&env));
        assert!(
            !calls.iter().any(|(_, r)| r.contains("httproutes")),
            "requests for an API the cluster does not serve: {calls:?}"
        );
    }

    env.install_gateway_crd().await;
    wait_for(
        "the HTTPRoute once Gateway API is installed",
        CONVERGE,
        || async { env.routes().get_opt(name).await.ok().flatten() },
    )
    .await;
    wait_ms(&env, name, "the Degraded reason to clear", CONVERGE, |ms| {
        condition(ms, "Degraded").map(|c| c.1) != Some("RouteUnavailable".into())
    })
    .await;
    env.finish().await;
}

/// A cluster with Gateway API but without the Inference Extension: a
/// ModelService whose route sends to an InferencePool says which kind is
/// missing, gets neither a picker nor a route to a pool that cannot exist,
/// and serves through its Service; once the CRD is installed, the pool, its
/// picker and the route appear and the reason clears by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_inference_extension_a_pool_route_gives_a_reason_and_recovers() {
    let env = Env::new().await;
    env.install_gateway_crd().await;
    env.remove_pool_crd().await;
    let _op = env.operator().arg("--discovery-interval").arg("1s").start();
    let name = "nopool";
    let spec = json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "runtime": {"image": serving_image(), "preset": "sglang"}, "resources": {"gpus": 0},
        "replicas": 1, "route": {"parentRefs": [{"name": "gateway"}], "backend": "InferencePool"}});
    env.apply_ms_v1(name, spec).await;

    let ms = wait_ms(&env, name, "Degraded RouteUnavailable", CONVERGE, |ms| {
        condition(ms, "Degraded") == Some(("True".into(), "RouteUnavailable".into()))
    })
    .await;
    assert!(
        message(&ms, "Degraded").contains("InferencePool"),
        "the missing kind is named: {}",
        message(&ms, "Degraded")
    );
    // The model serves through its Service, with the metrics a picker
    // will read (SGLang serves them only when asked).
    let d = wait_for("the model's Deployment", CONVERGE, || async {
        env.api::<Deployment>().get_opt(name).await.ok().flatten()
    })
    .await;
    let args = d
        .spec
        .template
        .spec
        .map(|p| p.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default();
    assert!(args.contains(&"--enable-metrics".to_string()), "{args:?}");
    if pods_can_serve("pool missing") {
        wait_ms(&env, name, "Ready", CONVERGE, |ms| {
            condition(ms, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
    }
    for (what, found) in [
        (
            "the picker",
            env.api::<Deployment>()
                .get_opt("nopool-epp")
                .await
                .ok()
                .flatten()
                .is_some(),
        ),
        (
            "a route",
            env.routes().get_opt(name).await.ok().flatten().is_some(),
        ),
    ] {
        assert!(!found, "{what} without InferencePool in the cluster");
    }
    if !real_cluster() {
        let calls = calls(&operator_requests(&env));
        assert!(
            !calls.iter().any(|(_, r)| r.contains("inferencepools")),
            "requests for an API the cluster does not serve: {calls:?}"
        );
    }

    env.install_pool_crd().await;
    wait_for("the InferencePool once installed", CONVERGE, || async {
        env.pools().get_opt(name).await.ok().flatten()
    })
    .await;
    wait_for("the picker", CONVERGE, || async {
        env.api::<Deployment>()
            .get_opt("nopool-epp")
            .await
            .ok()
            .flatten()
    })
    .await;
    wait_for("the route to the pool", CONVERGE, || async {
        env.routes().get_opt(name).await.ok().flatten()
    })
    .await;
    wait_ms(&env, name, "the Degraded reason to clear", CONVERGE, |ms| {
        condition(ms, "Degraded").map(|c| c.1) != Some("RouteUnavailable".into())
    })
    .await;
    env.finish().await;
}
