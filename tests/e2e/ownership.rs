//! The operator adopts nothing: an object that holds a child's name and is
//! not controlled by the ModelService is never changed, owned or deleted,
//! and the ModelService says so (`Degraded`/`ChildConflict`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::{Api, Resource};
use modelservice_operator::api::ModelService;
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, Operator, wait_for};
use crate::observe::*;

/// What of an object must stay as its maker left it: its labels, owners
/// and the managers of its main resource (a write of ours would add
/// `modelservice-operator`). Not the resourceVersion: controllers write
/// status.
fn untouched_part(o: &impl Resource) -> Value {
    let meta = o.meta();
    let managers: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.is_none())
        .map(|m| m.manager.clone().unwrap_or_default())
        .collect();
    json!({"labels": meta.labels, "owners": meta.owner_references, "managers": managers})
}

async fn create<K>(api: &Api<K>, doc: Value) -> K
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(doc).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create the object someone else made")
}

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": "postgres"}, "ports": [{"port": 5432}]}})
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "theirs"}},
            "template": {"metadata": {"labels": {"app": "theirs"}},
                "spec": {"containers": [{"name": "app", "image": "example.com/theirs:1"}]}}}})
}

fn hpa(name: &str) -> Value {
    json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "theirs"},
            "minReplicas": 1, "maxReplicas": 2}})
}

fn route(name: &str) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": "theirs"}],
            "rules": [{"backendRefs": [{"name": "theirs", "port": 80}]}]}})
}

/// A v1 spec whose children are a Deployment, a Service, an HPA and
/// an HTTPRoute, all named `<name>`.
fn every_child() -> Value {
    json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "runtime": {"image": serving_image(), "port": 5432}, "resources": {"gpus": 0},
        "autoscaling": {"minReplicas": 1, "maxReplicas": 2},
        "route": {"parentRefs": [{"name": "gateway"}]}})
}

async fn conflict_named(env: &Env, op: &Operator, name: &str, kind: &str, holder: &str) {
    // Polled by hand, so that a timeout shows what the status said instead
    // and what the operator logged (CI once timed out here, unexplained).
    let deadline = std::time::Instant::now() + CONVERGE;
    let ms = loop {
        let ms = get_ms(env, name).await;
        if let Some(ms) = ms.as_ref().filter(|ms| {
            observed_current(ms)
                && condition(ms, "Degraded") == Some(("True".into(), "ChildConflict".into()))
        }) {
            break ms.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no Degraded ChildConflict on {name} within {CONVERGE:?}; status: {}\nlog:\n{}",
            ms.and_then(|m| serde_json::to_string(&m.status).ok())
                .unwrap_or_default(),
            op.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let m = message(&ms, "Degraded");
    assert!(
        m.starts_with(&format!("{kind} {name} already exists and is {holder}")),
        "{m}"
    );
    assert_eq!(
        condition(&ms, "Ready").map(|c| c.0),
        Some("False".into()),
        "a model whose child is someone else's is not Ready"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_it_did_not_make_are_never_changed_owned_or_deleted() {
    let env = Env::new().await;
    env.install_gateway_crd().await;
    let op = env.operator().start();
    // One ModelService per kind, so that each kind's check is reached (the
    // first conflict stops a reconcile's writes).
    let svc = create(&env.api::<Service>(), service("own-svc")).await;
    let dep = create(&env.api::<Deployment>(), deployment("own-dep")).await;
    let scaler = create(&env.api::<HorizontalPodAutoscaler>(), hpa("own-hpa")).await;
    let routes = env.routes();
    let rt = create::<DynamicObject>(&routes, route("own-route")).await;
    let before = [
        untouched_part(&svc),
        untouched_part(&dep),
        untouched_part(&scaler),
        untouched_part(&rt),
    ];
    for name in ["own-svc", "own-dep", "own-hpa", "own-route"] {
        env.apply_ms_v1(name, every_child()).await;
    }
    let holder = "not managed by modelservice-operator";
    conflict_named(&env, &op, "own-svc", "Service", holder).await;
    conflict_named(&env, &op, "own-dep", "Deployment", holder).await;
    conflict_named(&env, &op, "own-hpa", "HorizontalPodAutoscaler", holder).await;
    conflict_named(&env, &op, "own-route", "HTTPRoute", holder).await;

    let now = async || {
        [
            untouched_part(&env.api::<Service>().get("own-svc").await.expect("svc")),
            untouched_part(&env.api::<Deployment>().get("own-dep").await.expect("dep")),
            untouched_part(
                &env.api::<HorizontalPodAutoscaler>()
                    .get("own-hpa")
                    .await
                    .expect("hpa"),
            ),
            untouched_part(&routes.get("own-route").await.expect("route")),
        ]
    };
    // Several reconciles later (a conflict is looked at again).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(now().await, before, "nothing of theirs was written");
    let svc_now = env.api::<Service>().get("own-svc").await.expect("svc");
    assert_eq!(
        svc_now.spec.and_then(|s| s.selector),
        svc.spec.and_then(|s| s.selector),
        "the Service still selects its own pods"
    );
    assert_eq!(
        warnings(&env, "own-svc", "ChildConflict").await,
        1,
        "announced once"
    );

    for name in ["own-svc", "own-dep", "own-hpa", "own-route"] {
        env.api::<ModelService>()
            .delete(name, &DeleteParams::foreground())
            .await
            .expect("delete ModelService");
    }
    for name in ["own-svc", "own-dep", "own-hpa", "own-route"] {
        gone::<ModelService>(&env, name, "the ModelService to be deleted").await;
    }
    // Give a garbage collector the time to act, were anything ours.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        now().await,
        before,
        "all four survive the ModelServices' deletion"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_held_by_someone_else_appears_once_the_name_is_free() {
    let env = Env::new().await;
    let op = env.operator().start();
    create(&env.api::<Service>(), service("freed")).await;
    env.apply_ms("freed", cpu_spec()).await;
    conflict_named(
        &env,
        &op,
        "freed",
        "Service",
        "not managed by modelservice-operator",
    )
    .await;
    env.api::<Service>()
        .delete("freed", &DeleteParams::default())
        .await
        .expect("delete their Service");
    // Nothing watches their Service: the conflict is looked at again with
    // the requeue of a model that is not Ready (20 s).
    let svc = wait_for("our Service", CONVERGE, || async {
        env.api::<Service>()
            .get_opt("freed")
            .await
            .ok()
            .flatten()
            .filter(|s| {
                s.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "ModelService" && o.name == "freed")
            })
    })
    .await;
    assert_eq!(
        svc.spec
            .and_then(|s| s.selector)
            .and_then(|s| s.get("app.kubernetes.io/instance").cloned()),
        Some("freed".into())
    );
    wait_ms(&env, "freed", "the conflict to clear", CONVERGE, |ms| {
        condition(ms, "Degraded").is_some_and(|c| c.1 != "ChildConflict")
    })
    .await;
    env.finish().await;
}

/// Two ModelServices whose children would share a name: `pair`'s canary
/// and a ModelService named `pair-canary`. The first one there keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_modelservices_never_share_a_child() {
    let env = Env::new().await;
    let op = env.operator().start();
    let with_canary = json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "runtime": {"image": serving_image()}, "resources": {"gpus": 0},
        "rollout": {"canary": {"runtime": {"image": format!("{}-canary", serving_image())}}}});
    env.apply_ms_v1("pair", with_canary).await;
    let canary = wait_for("pair's canary", CONVERGE, || async {
        env.api::<Deployment>()
            .get_opt("pair-canary")
            .await
            .ok()
            .flatten()
    })
    .await;
    env.apply_ms("pair-canary", cpu_spec()).await;
    conflict_named(
        &env,
        &op,
        "pair-canary",
        "Deployment",
        "controlled by ModelService pair",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = env
        .api::<Deployment>()
        .get("pair-canary")
        .await
        .expect("canary");
    assert_eq!(
        untouched_part(&after),
        untouched_part(&canary),
        "pair's canary is still pair's alone"
    );
    let owner = |d: &Deployment| {
        d.metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| o.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(owner(&after), ["pair"]);
    env.finish().await;
}
