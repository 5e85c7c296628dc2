//! An inference gateway: with `route.backend: InferencePool`, the route
//! sends to an InferencePool behind an endpoint picker instead of the
//! Service, one pool per track with a canary, and status says whether the
//! Gateways accepted each pool and whether its picker is ready.
//!
//! No Gateway and no endpoint picker runs in either back end: the picker's
//! pods run as an ordinary image does there (Ready at once), and the test
//! writes the pool's status the way a Gateway of the Inference Extension
//! does. The API server checks every object against the upstream v1.6.0
//! InferencePool CRD and Gateway API's HTTPRoute CRD. The CRD-missing case
//! is in `route_missing`, which runs alone.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

const TRACK: &str = "serving.modelservice.dev/track";

/// A CPU-only model behind a pool, with an optional canary.
fn spec(canary: Option<Value>) -> Value {
    let mut s = json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "runtime": {"image": serving_image(), "preset": "vllm", "port": 8000},
        "resources": {"gpus": 0}, "replicas": 1,
        "route": {"parentRefs": [{"name": "inference-gateway"}], "backend": "InferencePool",
            "inferencePool": {"failureMode": "FailOpen"}}});
    if let Some(c) = canary {
        s["rollout"] = json!({"canary": c});
    }
    s
}

/// The route's backends as (kind, name, weight).
async fn backends(env: &Env, name: &str) -> Vec<(String, String, i64)> {
    let Ok(Some(r)) = env.routes().get_opt(name).await else {
        return Vec::new();
    };
    r.data["spec"]["rules"][0]["backendRefs"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .map(|b| {
                    (
                        b["kind"].as_str().unwrap_or("Service").to_string(),
                        b["name"].as_str().unwrap_or_default().to_string(),
                        b["weight"].as_i64().unwrap_or(1),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn pool(env: &Env, name: &str) -> Option<Value> {
    env.pools()
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .map(|p| p.data)
}

fn pool_status(
    ms: &modelservice_operator::api::ModelService,
) -> Vec<modelservice_operator::api::PoolStatus> {
    ms.status
        .as_ref()
        .and_then(|s| s.route.as_ref())
        .map(|r| r.pools.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_route_gets_a_pool_and_a_picker_and_reports_their_acceptance() {
    let env = Env::new().await;
    env.install_gateway_crd().await;
    env.install_pool_crd().await;
    let op = env.operator().start();
    let name = "pooled";
    env.apply_ms_v1(name, spec(None)).await;

    // The pool: the model's pods, the runtime port, its picker.
    let p = wait_for("the InferencePool", CONVERGE, || pool(&env, name)).await;
    assert_eq!(
        p["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/instance": name, "app.kubernetes.io/name": "modelservice"})
    );
    assert_eq!(p["spec"]["targetPorts"], json!([{"number": 8000}]));
    // (The real API server also fills in the schema's defaults, group ""
    // and kind Service: what the operator leaves out.)
    let epp = &p["spec"]["endpointPickerRef"];
    assert_eq!(
        (&epp["name"], &epp["port"], &epp["failureMode"]),
        (
            &json!("pooled-epp"),
            &json!({"number": 9002}),
            &json!("FailOpen")
        )
    );
    // The route sends to the pool, not the Service.
    let b = wait_for("the route to the pool", CONVERGE, || async {
        let b = backends(&env, name).await;
        (!b.is_empty()).then_some(b)
    })
    .await;
    assert_eq!(b, [("InferencePool".to_string(), name.to_string(), 1)]);
    let r = env.routes().get(name).await.expect("route");
    assert_eq!(
        r.data["spec"]["rules"][0]["backendRefs"][0]["group"],
        "inference.networking.k8s.io"
    );
    // The picker: its Deployment serves the pool, its Service is the one
    // the pool names, and it runs as its own account, bound to a Role that
    // only reads.
    let picker = wait_for("the endpoint picker", CONVERGE, || async {
        env.api::<Deployment>()
            .get_opt("pooled-epp")
            .await
            .ok()
            .flatten()
    })
    .await;
    let pod = picker.spec.template.clone();
    let pod_spec = pod.spec.expect("pod spec");
    let args = pod_spec.containers[0].args.clone().unwrap_or_default();
    let after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    assert_eq!(after("--pool-name").as_deref(), Some(name));
    assert_eq!(after("--pool-namespace"), Some(env.namespace.clone()));
    assert_eq!(pod_spec.service_account_name.as_deref(), Some("pooled-epp"));
    let pod_labels = pod.metadata.and_then(|m| m.labels).unwrap_or_default();
    assert!(
        !pod_labels.contains_key("app.kubernetes.io/instance"),
        "the picker's pods are not the model's: {pod_labels:?}"
    );
    let svc = env
        .api::<Service>()
        .get("pooled-epp")
        .await
        .expect("picker Service");
    let ports = svc.spec.and_then(|s| s.ports).unwrap_or_default();
    assert_eq!(ports[0].port, 9002);
    env.api::<ServiceAccount>()
        .get("pooled-epp")
        .await
        .expect("ServiceAccount");
    env.api::<ConfigMap>()
        .get("pooled-epp")
        .await
        .expect("ConfigMap");
    let role = env.api::<Role>().get("pooled-epp").await.expect("Role");
    for rule in role.rules.unwrap_or_default() {
        assert_eq!(rule.verbs, ["get", "list", "watch"], "read only: {rule:?}");
    }
    let binding = env
        .api::<RoleBinding>()
        .get("pooled-epp")
        .await
        .expect("RoleBinding");
    assert_eq!(binding.role_ref.name, "pooled-epp");
    // The model's Service selects only model pods, never the picker's.
    let model_selector = env
        .api::<Service>()
        .get(name)
        .await
        .ok()
        .and_then(|s| s.spec)
        .and_then(|s| s.selector)
        .unwrap_or_default();
    assert!(
        model_selector
            .iter()
            .any(|(k, v)| pod_labels.get(k) != Some(v))
    );

    // Status: the picker's readiness, then the pool accepted by a Gateway.
    if pods_can_serve("pool status") {
        wait_ms(&env, name, "the picker ready", CONVERGE, |ms| {
            pool_status(ms)
                .first()
                .is_some_and(|p| p.endpoint_picker_ready_replicas == 1)
        })
        .await;
        wait_ready(&env, name).await;
    }
    let ms = get_ms(&env, name).await.expect("ms");
    let pools = pool_status(&ms);
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!(
        (pools[0].name.as_str(), pools[0].endpoint_picker.as_str()),
        (name, "pooled-epp")
    );
    assert_eq!(pools[0].accepted, None, "no Gateway has said yet");
    env.pools()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"parents": [{
                "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway"},
                "controllerName": "example.com/inference-gateway",
                "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                     "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": "",
                     "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}})),
        )
        .await
        .expect("write the pool's status as a Gateway");
    let ms = wait_ms(&env, name, "the pool accepted", CONVERGE, |ms| {
        pool_status(ms)
            .first()
            .is_some_and(|p| p.accepted == Some(true))
    })
    .await;
    assert_eq!(pool_status(&ms)[0].parents[0].parent, "inference-gateway");

    // A canary: a pool of its own over the canary's pods, with its own
    // picker, and the route weighs the two pools once the canary serves.
    env.apply_ms_v1(
        name,
        spec(Some(
            json!({"runtime": {"image": format!("{}-canary", serving_image())}, "weight": 20}),
        )),
    )
    .await;
    let c = wait_for("the canary's pool", CONVERGE, || {
        pool(&env, "pooled-canary")
    })
    .await;
    assert_eq!(c["spec"]["selector"]["matchLabels"][TRACK], "canary");
    assert_eq!(c["spec"]["endpointPickerRef"]["name"], "pooled-canary-epp");
    wait_for("the canary's picker", CONVERGE, || async {
        env.api::<Deployment>()
            .get_opt("pooled-canary-epp")
            .await
            .ok()
            .flatten()
    })
    .await;
    let stable = pool(&env, name).await.expect("stable pool");
    assert_eq!(stable["spec"]["selector"]["matchLabels"][TRACK], "stable");
    if pods_can_serve("pool canary weights") {
        let weighted = wait_for("the route weighing two pools", CONVERGE, || async {
            let b = backends(&env, name).await;
            (b.len() == 2).then_some(b)
        })
        .await;
        assert_eq!(
            weighted,
            [
                ("InferencePool".to_string(), name.to_string(), 80),
                ("InferencePool".to_string(), "pooled-canary".to_string(), 20)
            ]
        );
    }

    // The canary goes: its pool and picker go with it.
    env.apply_ms_v1(name, spec(None)).await;
    gone_pool(&env, "pooled-canary").await;
    gone::<Deployment>(&env, "pooled-canary-epp", "the canary's picker").await;
    gone::<Service>(&env, "pooled-canary-epp", "the canary's picker Service").await;

    // Removing the route removes the route, the pool and everything of
    // its picker.
    let mut bare = spec(None);
    bare.as_object_mut().map(|o| o.remove("route"));
    env.apply_ms_v1(name, bare).await;
    gone_from(env.routes(), name, "the route").await;
    gone_pool(&env, name).await;
    gone::<Deployment>(&env, "pooled-epp", "the picker").await;
    gone::<Service>(&env, "pooled-epp", "the picker Service").await;
    gone::<ServiceAccount>(&env, "pooled-epp", "the picker's ServiceAccount").await;
    gone::<Role>(&env, "pooled-epp", "the picker's Role").await;
    gone::<RoleBinding>(&env, "pooled-epp", "the picker's RoleBinding").await;
    gone::<ConfigMap>(&env, "pooled-epp", "the picker's ConfigMap").await;
    wait_ms(&env, name, "no route in status", CONVERGE, |ms| {
        ms.status.as_ref().is_some_and(|s| s.route.is_none())
    })
    .await;
    assert!(
        env.api::<Service>()
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .is_some(),
        "the model's Service stays"
    );
    drop(op);
    env.finish().await;
}

async fn gone_pool(env: &Env, name: &str) {
    gone_from(env.pools(), name, &format!("InferencePool {name}")).await;
}

async fn gone_from(api: kube::Api<kube::api::DynamicObject>, name: &str, what: &str) {
    wait_for(&format!("{what} gone"), CONVERGE, || async {
        api.get_opt(name)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
}
