//! Server-side apply: ownership, removal, conflicts, no-op applies.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, WatchParams};
use serde_json::json;

use crate::{ms_api, ns, rv_of, start, start_either, status_of};

fn config(labels: serde_json::Value, data: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": labels},
        "data": data,
    })
}

#[tokio::test]
async fn apply_creates_then_removes_fields_it_stopped_applying() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PatchParams::apply("op");
    let o = api
        .patch(
            "a",
            &pp,
            &Patch::Apply(config(
                json!({"x": "1", "y": "2"}),
                json!({"k": "v", "j": "w"}),
            )),
        )
        .await
        .unwrap();
    assert_eq!(o.metadata.labels.as_ref().unwrap().len(), 2);
    let mf = &o.metadata.managed_fields.as_ref().unwrap()[0];
    assert_eq!(mf.manager.as_deref(), Some("op"));
    assert_eq!(mf.operation.as_deref(), Some("Apply"));
    assert_eq!(mf.api_version.as_deref(), Some("v1"));
    assert_eq!(mf.fields_type.as_deref(), Some("FieldsV1"));
    assert_eq!(
        serde_json::to_value(mf.fields_v1.as_ref().unwrap()).unwrap(),
        json!({"f:data": {"f:j": {}, "f:k": {}}, "f:metadata": {"f:labels": {"f:x": {}, "f:y": {}}}})
    );

    // Someone else adds a label with a plain (Update) patch.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"z": "3"}}})),
    )
    .await
    .unwrap();
    // Dropping y and j removes them; z (owned by someone else) survives.
    let o = api
        .patch(
            "a",
            &pp,
            &Patch::Apply(config(json!({"x": "1"}), json!({"k": "v"}))),
        )
        .await
        .unwrap();
    let labels = o.metadata.labels.unwrap();
    assert_eq!(labels.keys().collect::<Vec<_>>(), ["x", "z"]);
    assert_eq!(o.data.unwrap().keys().collect::<Vec<_>>(), ["k"]);
}

// Fake-only: it reads the fake's global resourceVersion counter to prove nothing was written.
#[tokio::test]
async fn noop_apply_does_not_write() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PatchParams::apply("op").force();
    let cfg = config(json!({"x": "1"}), json!({"k": "v"}));
    let first = api.patch("a", &pp, &Patch::Apply(&cfg)).await.unwrap();

    let mut events = api
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &rv_of(&first.metadata).to_string(),
        )
        .await
        .unwrap()
        .boxed();
    server.reset_counts();
    for _ in 0..3 {
        let again = api.patch("a", &pp, &Patch::Apply(&cfg)).await.unwrap();
        assert_eq!(
            again.metadata.resource_version,
            first.metadata.resource_version
        );
        assert_eq!(again.metadata.managed_fields, first.metadata.managed_fields);
    }
    assert_eq!(
        server
            .counts()
            .get(fake_apiserver::Verb::Patch, "configmaps"),
        3
    );
    let r = tokio::time::timeout(Duration::from_millis(300), events.try_next()).await;
    assert!(r.is_err(), "no watch event for a no-op apply: {r:?}");
}

#[tokio::test]
async fn conflicting_apply_needs_force() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let cfg = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": v}});
    api.patch("a", &PatchParams::apply("one"), &Patch::Apply(cfg("1")))
        .await
        .unwrap();
    // Same value: shared ownership, no conflict.
    api.patch("a", &PatchParams::apply("two"), &Patch::Apply(cfg("1")))
        .await
        .unwrap();
    api.patch("a", &PatchParams::apply("three"), &Patch::Apply(cfg("1")))
        .await
        .unwrap();
    let s = status_of(
        api.patch("a", &PatchParams::apply("two"), &Patch::Apply(cfg("2")))
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Apply failed with 2 conflicts: conflicts with \"one\":\n- .data.k\nconflicts with \"three\":\n- .data.k"
    );
    let o = api
        .patch(
            "a",
            &PatchParams::apply("two").force(),
            &Patch::Apply(cfg("2")),
        )
        .await
        .unwrap();
    assert_eq!(o.data.unwrap()["k"], "2");
    let managers: Vec<_> = o
        .metadata
        .managed_fields
        .unwrap()
        .iter()
        .map(|m| m.manager.clone().unwrap())
        .collect();
    assert_eq!(managers, ["two"], "force took the field from everyone else");

    // An Update manager's change also makes the applier conflict.
    api.patch(
        "a",
        &PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..Default::default()
        },
        &Patch::Merge(&json!({"data": {"k": "3"}})),
    )
    .await
    .unwrap();
    let s = status_of(
        api.patch("a", &PatchParams::apply("two"), &Patch::Apply(cfg("2")))
            .await,
    );
    assert_eq!(
        s.message,
        "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.k"
    );
}

// Fake-only: it merges lists under fields the ModelService schema does not
// declare, which a real server refuses in an apply (the fake has no schema).
#[tokio::test]
async fn apply_merges_keyed_lists_and_applies_status_separately() {
    let (_server, client) = start().await;
    let api = ms_api(&client, ns(&client));
    let body = |containers: serde_json::Value| {
        json!({
            "apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
            "metadata": {"name": "m"},
            "spec": {"containers": containers, "args": ["a", "b"]},
            "status": {"ignored": true}
        })
    };
    let o = api
        .patch(
            "m",
            &PatchParams::apply("op"),
            &Patch::Apply(body(
                json!([{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]),
            )),
        )
        .await
        .unwrap();
    assert!(
        o.data.get("status").is_none(),
        "status is not applied through the main endpoint"
    );
    // Another manager adds a field inside container a.
    let other = json!({
        "apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
        "metadata": {"name": "m"},
        "spec": {"containers": [{"name": "a", "env": [{"name": "E", "value": "1"}]}]}
    });
    api.patch("m", &PatchParams::apply("sidecar"), &Patch::Apply(other))
        .await
        .unwrap();
    // op drops container b and changes a's image: b goes, a keeps env.
    let o = api
        .patch(
            "m",
            &PatchParams::apply("op"),
            &Patch::Apply(body(json!([{"name": "a", "image": "2"}]))),
        )
        .await
        .unwrap();
    assert_eq!(
        o.data["spec"]["containers"],
        json!([{"name": "a", "image": "2", "env": [{"name": "E", "value": "1"}]}])
    );
    let gen_before = o.metadata.generation;

    let status = json!({
        "apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
        "metadata": {"name": "m"}, "status": {"phase": "Ready"}
    });
    let o = api
        .patch_status("m", &PatchParams::apply("op"), &Patch::Apply(status))
        .await
        .unwrap();
    assert_eq!(o.data["status"]["phase"], "Ready");
    assert_eq!(o.metadata.generation, gen_before);
    let mf = serde_json::to_value(o.metadata.managed_fields.unwrap()).unwrap();
    assert!(
        mf.as_array()
            .unwrap()
            .iter()
            .any(|e| e["manager"] == "op" && e["subresource"] == "status"),
        "{mf}"
    );
}

#[tokio::test]
async fn apply_rejects_managed_fields_in_the_configuration() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut cfg = config(json!({}), json!({}));
    cfg["metadata"]["managedFields"] = json!([{"manager": "x"}]);
    let s = status_of(
        api.patch("a", &PatchParams::apply("op"), &Patch::Apply(cfg))
            .await,
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (400, "metadata.managedFields must be nil")
    );
}

// Fake-only: it reads the fake's global resourceVersion counter to prove the re-apply wrote nothing.
#[tokio::test]
async fn operator_style_reapply_of_a_deployment_is_stable() {
    use k8s_openapi::api::apps::v1::Deployment;
    let (server, client) = start().await;
    let api: Api<Deployment> = Api::default_namespaced(client);
    // What an operator typically applies: no replicas (an HPA owns them).
    let desired: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "server", "image": "img:1",
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "env": [{"name": "A", "value": "1"}]
                }]}
            }
        }
    }))
    .unwrap();
    let pp = PatchParams::apply("modelservice-operator").force();
    let first = api
        .patch("web", &pp, &Patch::Apply(&desired))
        .await
        .unwrap();
    assert_eq!(first.spec.replicas, Some(1), "defaulted by the server");

    // An HPA scales through /scale, a controller writes status.
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    api.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"replicas": 3}})),
    )
    .await
    .unwrap();

    let rv = server.resource_version();
    let again = api
        .patch("web", &pp, &Patch::Apply(&desired))
        .await
        .unwrap();
    assert_eq!(server.resource_version(), rv, "re-apply wrote nothing");
    assert_eq!(
        again.spec.replicas,
        Some(3),
        "replicas stay with the scaler"
    );
    assert_eq!(
        again.metadata.generation,
        Some(2),
        "only the scale bumped generation"
    );
}

/// The same merge on a built-in list that a real server keys by name
/// (a pod template's containers, and each container's env).
#[tokio::test]
async fn apply_merges_containers_by_name_across_managers() {
    use k8s_openapi::api::apps::v1::Deployment;
    let (_backend, client) = start_either().await;
    let api: Api<Deployment> = Api::default_namespaced(client);
    let body = |containers: serde_json::Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}
        })
    };
    api.patch(
        "web",
        &PatchParams::apply("op"),
        &Patch::Apply(body(
            json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]),
        )),
    )
    .await
    .unwrap();
    let sidecar = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "E", "value": "1"}]}]}}}
    });
    api.patch(
        "web",
        &PatchParams::apply("sidecar"),
        &Patch::Apply(sidecar),
    )
    .await
    .unwrap();
    // op drops container b and changes a's image: b goes, a keeps the env.
    let d = api
        .patch(
            "web",
            &PatchParams::apply("op"),
            &Patch::Apply(body(json!([{"name": "a", "image": "a:2"}]))),
        )
        .await
        .unwrap();
    let containers = d
        .spec
        .template
        .spec
        .map(|p| p.containers)
        .unwrap_or_default();
    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a"]);
    assert_eq!(containers[0].image.as_deref(), Some("a:2"));
    let env: Vec<(String, Option<String>)> = containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    assert_eq!(env, [("E".to_string(), Some("1".to_string()))]);
}
