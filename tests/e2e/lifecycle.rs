//! Create, then update: the children follow the spec, status follows the children.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use modelservice_operator::api::ModelService;
use serde_json::json;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_builds_owned_children_and_reports_status() {
    let env = Env::new().await;
    let _op = env.operator().start();
    let ms = env
        .apply_ms("llama", json!({"model": "meta-llama/Llama-3.1-8B-Instruct", "image": serving_image(), "gpus": 2, "port": 9000}))
        .await;
    let uid = ms.uid().expect("uid");

    let dep: Deployment = wait_for("the Deployment", CONVERGE, || deployment(&env, "llama")).await;
    let owner = &dep.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("ModelService", "llama", uid.as_str())
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    for (k, v) in [
        ("app.kubernetes.io/name", "modelservice"),
        ("app.kubernetes.io/instance", "llama"),
        ("app.kubernetes.io/managed-by", "modelservice-operator"),
    ] {
        assert_eq!(
            dep.labels().get(k).map(String::as_str),
            Some(v),
            "label {k}"
        );
    }
    let c = &dep
        .spec
        .template
        .spec
        .as_ref()
        .expect("pod spec")
        .containers[0];
    let limits = c
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .expect("limits");
    assert_eq!(
        limits.get("nvidia.com/gpu").map(|q| q.0.as_str()),
        Some("2")
    );
    assert_eq!(
        c.ports
            .as_ref()
            .map(|p| (p[0].name.clone(), p[0].container_port)),
        Some((Some("http".into()), 9000))
    );
    assert_eq!(dep.spec.replicas, Some(1));

    let svc: Service = wait_for("the Service", CONVERGE, || async {
        env.api::<Service>().get_opt("llama").await.ok().flatten()
    })
    .await;
    assert_eq!(svc.owner_references()[0].uid, uid);
    let port = &svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .expect("ports")[0];
    assert_eq!((port.port, port.name.as_deref()), (9000, Some("http")));

    let ms = wait_ms(
        &env,
        "llama",
        "status for the first generation",
        CONVERGE,
        |_| true,
    )
    .await;
    assert!(
        ms.finalizers()
            .iter()
            .any(|f| f == "serving.modelservice.dev/cleanup"),
        "finalizer added"
    );
    let st = ms.status.clone().expect("status");
    assert_eq!(
        st.url.as_deref(),
        Some(format!("http://llama.{}.svc:9000", env.namespace).as_str())
    );
    assert_eq!(
        st.selector.as_deref(),
        Some("app.kubernetes.io/instance=llama,app.kubernetes.io/name=modelservice")
    );
    if pods_can_serve("create_builds_owned_children_and_reports_status") {
        let ms = wait_ready(&env, "llama").await;
        assert_eq!(
            condition(&ms, "Ready"),
            Some(("True".into(), "Available".into()))
        );
        assert_eq!(ms.status.and_then(|s| s.ready_replicas), Some(1));
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_update_is_followed_through() {
    let env = Env::new().await;
    let _op = env.operator().start();
    env.apply_ms("qwen", cpu_spec()).await;
    let first = wait_ms(&env, "qwen", "first generation observed", CONVERGE, |_| {
        true
    })
    .await;

    let mut spec = cpu_spec();
    spec["args"] = json!(["--max-model-len", "4096"]);
    spec["replicas"] = json!(2);
    spec["modelVersion"] = json!("2025-01-01");
    env.apply_ms("qwen", spec).await;
    let ms = wait_ms(
        &env,
        "qwen",
        "the new generation observed",
        CONVERGE,
        |ms| ms.metadata.generation > first.metadata.generation,
    )
    .await;
    assert!(observed_current(&ms));

    let dep = wait_for("the Deployment to carry the new spec", CONVERGE, || async {
        let d = deployment(&env, "qwen").await?;
        let args = d.spec.template.spec.as_ref()?.containers[0].args.clone()?;
        (args.ends_with(&["--max-model-len".to_string(), "4096".to_string()])
            && d.spec.replicas == Some(2))
        .then_some(d)
    })
    .await;
    let labels = dep
        .spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .expect("pod labels");
    assert_eq!(
        labels
            .get("modelservice.dev/model-version")
            .map(String::as_str),
        Some("2025-01-01")
    );
    if pods_can_serve("a_spec_update_is_followed_through") {
        let ms: ModelService = wait_ms(&env, "qwen", "two ready replicas", CONVERGE, |ms| {
            condition(ms, "Ready").is_some_and(|(s, _)| s == "True")
                && ms.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
        })
        .await;
        assert_eq!(
            condition(&ms, "Progressing").map(|c| c.1),
            Some("RolloutComplete".into())
        );
    }
    env.finish().await;
}

/// A name that cannot name the Service (not a DNS-1035 label, or longer
/// than 63 characters) is refused when applied, with a message that names
/// `metadata.name`, instead of an object whose children can never exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_cannot_name_the_children_are_refused() {
    if !needs_real(
        "names_that_cannot_name_the_children_are_refused",
        "the fake API server does not evaluate CEL rules",
    ) {
        return;
    }
    let env = Env::new().await;
    for bad in ["7b-llama".to_string(), "a".repeat(70)] {
        let err = env
            .try_apply_ms(&bad, cpu_spec(), &kube::api::PatchParams::apply("e2e-user"))
            .await
            .expect_err("a name that cannot name a Service must be refused");
        assert!(err.to_string().contains("metadata.name"), "{bad}: {err}");
    }
    env.finish().await;
}
