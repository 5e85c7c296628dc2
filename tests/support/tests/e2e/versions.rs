//! A custom resource served at several versions: objects stored at `v1`,
//! converted for `v1alpha1` by a conversion hook, on every verb.
//!
//! Fake-only, all of them: they use a test converter with shapes of their
//! own, which on a real server would need a webhook serving it. The
//! operator's own conversion is run on a real server by the main crate's
//! e2e suite (both versions, through its webhook).

use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::{Converter, FakeApiServer};
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::{raw, rv_of, status_of};

const GROUP: &str = "serving.modelservice.dev";
const ALPHA: &str = "serving.modelservice.dev/v1alpha1";
/// The stored version.
const STORED: &str = "serving.modelservice.dev/v1";

/// The test's conversion webhook. The versions differ in `spec.model`:
/// `v1alpha1` has the model's name as a string, `v1` an object
/// `{name}`. A model named `unconvertible` makes the webhook fail.
fn model_converter() -> Converter {
    Arc::new(|mut obj: Value, to: &str| {
        let Some(model) = obj.pointer_mut("/spec/model") else {
            obj["apiVersion"] = json!(to);
            return Ok(obj);
        };
        let name = match &*model {
            Value::String(s) => s.clone(),
            other => other["name"].as_str().unwrap_or_default().to_string(),
        };
        if name == "unconvertible" {
            return Err(format!("cannot convert model {name:?}"));
        }
        *model = match to {
            ALPHA => json!(name),
            STORED => json!({ "name": name }),
            _ => return Err(format!("unknown version {to}")),
        };
        obj["apiVersion"] = json!(to);
        Ok(obj)
    })
}

async fn start_converting() -> (FakeApiServer, Client) {
    let server = FakeApiServer::builder()
        .with_converter("modelservices", model_converter())
        .start()
        .await;
    let client = server.client();
    (server, client)
}

fn resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, version, "ModelService"),
        "modelservices",
    )
}

fn alpha(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &resource("v1alpha1"))
}

fn at_v1(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &resource("v1"))
}

/// A ModelService at `version` whose spec is `spec` plus the model.
fn ms_at(version: &str, name: &str, model: &str, mut spec: Value) -> DynamicObject {
    spec["model"] = if version == "v1alpha1" {
        json!(model)
    } else {
        json!({ "name": model })
    };
    spec.as_object_mut()
        .expect("a spec object")
        .entry("image")
        .or_insert_with(|| json!("i"));
    let mut o = DynamicObject::new(name, &resource(version));
    o.data = json!({ "spec": spec });
    o
}

fn api_version(o: &DynamicObject) -> &str {
    o.types.as_ref().map_or("", |t| t.api_version.as_str())
}

fn path(version: &str, rest: &str) -> String {
    format!("/apis/{GROUP}/{version}/namespaces/default/modelservices{rest}")
}

#[tokio::test]
async fn created_at_v1alpha1_stored_at_v1_read_at_both() {
    let (server, client) = start_converting().await;
    let created = alpha(&client)
        .create(
            &PostParams::default(),
            &ms_at("v1alpha1", "m", "llama", json!({})),
        )
        .await
        .expect("create at v1alpha1");
    assert_eq!(api_version(&created), ALPHA);
    assert_eq!(created.data["spec"]["model"], "llama");

    let stored = server
        .get_object(GROUP, "modelservices", "default", "m")
        .expect("stored");
    assert_eq!(stored["apiVersion"], STORED);
    assert_eq!(stored["spec"]["model"], json!({"name": "llama"}));

    let b = at_v1(&client).get("m").await.expect("get at v1");
    let a = alpha(&client).get("m").await.expect("get at v1alpha1");
    assert_eq!(api_version(&b), STORED);
    assert_eq!(b.data["spec"]["model"], json!({"name": "llama"}));
    assert_eq!(api_version(&a), ALPHA);
    assert_eq!(a.data["spec"]["model"], "llama");
    // One object: same identity, version and generation at both versions.
    for o in [&a, &b] {
        assert_eq!(o.metadata.uid, created.metadata.uid);
        assert_eq!(
            o.metadata.resource_version,
            created.metadata.resource_version
        );
        assert_eq!(o.metadata.generation, Some(1));
    }
    // The creator's managedFields entry records the version it wrote with.
    let mf = b.metadata.managed_fields.as_ref().expect("managedFields");
    assert_eq!(mf[0].api_version.as_deref(), Some(ALPHA));

    // Metadata-only reads stay meta.k8s.io at either version.
    let (code, body) = crate::raw_with_accept(
        &client,
        &path("v1alpha1", "/m"),
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(body["metadata"]["name"], "m");
    assert_eq!(body.get("spec"), None);
}

#[tokio::test]
async fn lists_and_watches_at_both_versions() {
    let (_server, client) = start_converting().await;
    let pp = PostParams::default();
    alpha(&client)
        .create(&pp, &ms_at("v1alpha1", "a", "llama", json!({})))
        .await
        .expect("create a");
    let mut alpha_events = alpha(&client)
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .expect("watch at v1alpha1")
        .boxed();
    let mut beta_events = at_v1(&client)
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .expect("watch at v1")
        .boxed();
    let b = at_v1(&client)
        .create(&pp, &ms_at("v1", "b", "mistral", json!({})))
        .await
        .expect("create b");

    for (api, av, model_a) in [
        (alpha(&client), ALPHA, json!("llama")),
        (at_v1(&client), STORED, json!({"name": "llama"})),
    ] {
        let list = api.list(&ListParams::default()).await.expect("list");
        let names: Vec<_> = list.items.iter().map(|o| o.metadata.name.clone()).collect();
        assert_eq!(names, [Some("a".to_string()), Some("b".to_string())]);
        assert!(list.items.iter().all(|o| api_version(o) == av));
        assert_eq!(list.items[0].data["spec"]["model"], model_a);
        let list_rv: u64 = list
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .expect("a list resourceVersion");
        assert!(rv_of(&b.metadata) <= list_rv);
    }
    // The list itself says the request's version.
    let (code, body) = raw(&client, "GET", &path("v1alpha1", ""), None, "").await;
    assert_eq!(code, 200);
    assert_eq!(
        (body["apiVersion"].as_str(), body["kind"].as_str()),
        (Some(ALPHA), Some("ModelServiceList"))
    );
    assert_eq!(body["items"][1]["spec"]["model"], "mistral");

    alpha(&client)
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("patch b");
    alpha(&client)
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete a");

    let mut seen = Vec::new();
    for (events, av) in [(&mut alpha_events, ALPHA), (&mut beta_events, STORED)] {
        let mut got = Vec::new();
        while got.len() < 4 {
            let e = tokio::time::timeout(Duration::from_secs(5), events.try_next())
                .await
                .expect("an event within 5s")
                .expect("no stream error")
                .expect("stream open");
            let (kind, o) = match e {
                WatchEvent::Added(o) => ("ADDED", o),
                WatchEvent::Modified(o) => ("MODIFIED", o),
                WatchEvent::Deleted(o) => ("DELETED", o),
                other => panic!("unexpected {other:?}"),
            };
            assert_eq!(api_version(&o), av, "{kind} at {av}");
            let model = &o.data["spec"]["model"];
            assert!(
                if av == ALPHA {
                    model.is_string()
                } else {
                    model.is_object()
                },
                "{kind} at {av}: {model}"
            );
            got.push((
                kind,
                o.metadata.name.clone().unwrap_or_default(),
                o.metadata.resource_version.clone(),
            ));
        }
        let kinds: Vec<_> = got.iter().map(|(k, n, _)| (*k, n.as_str())).collect();
        assert_eq!(
            kinds,
            [
                ("ADDED", "a"),
                ("ADDED", "b"),
                ("MODIFIED", "b"),
                ("DELETED", "a")
            ]
        );
        seen.push(got);
    }
    assert_eq!(seen[0], seen[1], "one history, seen at two versions");
}

#[tokio::test]
async fn apply_at_two_versions_by_two_managers() {
    let (_server, client) = start_converting().await;
    let cfg = |av: &str, spec: Value| json!({"apiVersion": av, "kind": "ModelService", "metadata": {"name": "m"}, "spec": spec});
    let alpha_mgr = PatchParams::apply("alpha-mgr");
    let beta_mgr = PatchParams::apply("beta-mgr");
    alpha(&client)
        .patch(
            "m",
            &alpha_mgr,
            &Patch::Apply(cfg(ALPHA, json!({"model": "llama", "image": "img:1"}))),
        )
        .await
        .expect("apply at v1alpha1");
    let o = at_v1(&client)
        .patch(
            "m",
            &beta_mgr,
            &Patch::Apply(cfg(STORED, json!({"replicas": 3}))),
        )
        .await
        .expect("apply at v1");
    assert_eq!(api_version(&o), STORED);
    assert_eq!(
        o.data["spec"],
        json!({"model": {"name": "llama"}, "image": "img:1", "replicas": 3})
    );
    let entries = |o: &DynamicObject| -> Vec<(String, String, Value)> {
        o.metadata
            .managed_fields
            .iter()
            .flatten()
            .map(|e| {
                (
                    e.manager.clone().unwrap_or_default(),
                    e.api_version.clone().unwrap_or_default(),
                    serde_json::to_value(&e.fields_v1).unwrap_or_default(),
                )
            })
            .collect()
    };
    assert_eq!(
        entries(&o),
        [
            (
                "alpha-mgr".into(),
                ALPHA.into(),
                json!({"f:spec": {"f:image": {}, "f:model": {}}})
            ),
            (
                "beta-mgr".into(),
                STORED.into(),
                json!({"f:spec": {"f:replicas": {}}})
            ),
        ]
    );

    // Changing the model at v1 changes the field alpha-mgr owns at
    // v1alpha1: a conflict, named at alpha-mgr's version.
    let changed = cfg(STORED, json!({"replicas": 3, "model": {"name": "mistral"}}));
    let s = status_of(
        at_v1(&client)
            .patch("m", &beta_mgr, &Patch::Apply(&changed))
            .await,
    );
    assert_eq!(s.code, 409);
    assert_eq!(
        s.message,
        "Apply failed with 1 conflict: conflict with \"alpha-mgr\": .spec.model"
    );
    let o = at_v1(&client)
        .patch(
            "m",
            &PatchParams::apply("beta-mgr").force(),
            &Patch::Apply(&changed),
        )
        .await
        .expect("forced apply");
    assert_eq!(o.data["spec"]["model"], json!({"name": "mistral"}));
    assert_eq!(
        entries(&o),
        [
            (
                "alpha-mgr".into(),
                ALPHA.into(),
                json!({"f:spec": {"f:image": {}}})
            ),
            (
                "beta-mgr".into(),
                STORED.into(),
                json!({"f:spec": {"f:model": {"f:name": {}}, "f:replicas": {}}})
            ),
        ]
    );

    // alpha-mgr stops applying the image: it goes, the rest stays.
    let a = alpha(&client)
        .patch(
            "m",
            &alpha_mgr,
            &Patch::Apply(cfg(ALPHA, json!({"model": "mistral"}))),
        )
        .await
        .expect("apply without the image");
    assert_eq!(a.data["spec"], json!({"model": "mistral", "replicas": 3}));
    // beta-mgr stops applying the model, which alpha-mgr now co-owns at
    // v1alpha1: it stays.
    let b = at_v1(&client)
        .patch(
            "m",
            &beta_mgr,
            &Patch::Apply(cfg(STORED, json!({"replicas": 3}))),
        )
        .await
        .expect("apply without the model");
    assert_eq!(
        b.data["spec"],
        json!({"model": {"name": "mistral"}, "replicas": 3})
    );
    // Re-applying the same configuration at either version writes nothing.
    let again = alpha(&client)
        .patch(
            "m",
            &alpha_mgr,
            &Patch::Apply(cfg(ALPHA, json!({"model": "mistral"}))),
        )
        .await
        .expect("same apply");
    assert_eq!(again.metadata.resource_version, b.metadata.resource_version);
}

#[tokio::test]
async fn patches_at_v1alpha1_apply_to_the_v1alpha1_shape() {
    let (server, client) = start_converting().await;
    at_v1(&client)
        .create(
            &PostParams::default(),
            &ms_at("v1", "m", "llama", json!({})),
        )
        .await
        .expect("create at v1");
    let o = alpha(&client)
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"model": "mistral"}})),
        )
        .await
        .expect("merge patch at v1alpha1");
    assert_eq!(
        (api_version(&o), &o.data["spec"]["model"]),
        (ALPHA, &json!("mistral"))
    );
    assert_eq!(o.metadata.generation, Some(2));
    let stored = server
        .get_object(GROUP, "modelservices", "default", "m")
        .expect("stored");
    assert_eq!(stored["spec"]["model"], json!({"name": "mistral"}));

    let p: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/model", "value": "mistral"},
        {"op": "replace", "path": "/spec/model", "value": "phi"},
    ]))
    .expect("a JSON patch");
    let o = alpha(&client)
        .patch("m", &PatchParams::default(), &Patch::Json::<()>(p))
        .await
        .expect("JSON patch at v1alpha1");
    assert_eq!(o.data["spec"]["model"], "phi");
    assert_eq!(
        at_v1(&client).get("m").await.expect("get").data["spec"]["model"],
        json!({"name": "phi"})
    );

    // Status and scale work at v1alpha1 too, on the same object.
    alpha(&client)
        .patch_status(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "selector": "app=m"}})),
        )
        .await
        .expect("status at v1alpha1");
    let scaled = alpha(&client)
        .patch_scale(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale at v1alpha1");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(4));
    let scale = at_v1(&client).get_scale("m").await.expect("scale at v1");
    assert_eq!(
        scale
            .status
            .as_ref()
            .map(|s| (s.replicas, s.selector.clone())),
        Some((1, Some("app=m".into())))
    );
    let b = at_v1(&client).get("m").await.expect("get");
    assert_eq!(
        (b.data["spec"]["replicas"].as_i64(), b.metadata.generation),
        (Some(4), Some(4))
    );
}

#[tokio::test]
async fn a_failing_conversion_is_a_500_and_changes_nothing() {
    let (server, client) = start_converting().await;
    let rv = server.resource_version();
    let s = status_of(
        alpha(&client)
            .create(
                &PostParams::default(),
                &ms_at("v1alpha1", "m", "unconvertible", json!({})),
            )
            .await,
    );
    assert_eq!(s.code, 500);
    assert!(
        s.message.contains(&format!(
            "conversion webhook for {ALPHA}, Kind=ModelService failed: cannot convert model \"unconvertible\""
        )),
        "{}",
        s.message
    );
    assert_eq!(server.resource_version(), rv, "nothing stored");
    assert_eq!(status_of(at_v1(&client).get("m").await).code, 404);

    // Stored at v1 (no conversion on the way in), it cannot be read,
    // written or deleted at v1alpha1; at v1 it can.
    at_v1(&client)
        .create(
            &PostParams::default(),
            &ms_at("v1", "m", "unconvertible", json!({})),
        )
        .await
        .expect("create at the storage version");
    let rv = server.resource_version();
    assert_eq!(status_of(alpha(&client).get("m").await).code, 500);
    assert_eq!(
        status_of(alpha(&client).list(&ListParams::default()).await).code,
        500
    );
    let patched = alpha(&client)
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await;
    assert_eq!(status_of(patched).code, 500);
    assert_eq!(
        status_of(alpha(&client).delete("m", &DeleteParams::default()).await).code,
        500
    );
    assert_eq!(server.resource_version(), rv, "nothing written");
    at_v1(&client).get("m").await.expect("get at v1");

    // A watch at v1alpha1 ends with an ERROR event carrying the Status.
    let (code, body) = raw(
        &client,
        "GET",
        &format!("{}?watch=1&timeoutSeconds=2", path("v1alpha1", "")),
        None,
        "",
    )
    .await;
    assert_eq!(code, 200);
    let body = body
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string());
    let first: Value =
        serde_json::from_str(body.lines().next().unwrap_or_default()).expect("a JSON event line");
    assert_eq!(first["type"], "ERROR");
    assert_eq!(first["object"]["code"], 500);

    // The webhook going down fails every read at the other version.
    at_v1(&client)
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"model": {"name": "llama"}}})),
        )
        .await
        .expect("fix the model");
    alpha(&client).get("m").await.expect("converts again");
    assert!(server.set_converter(
        "modelservices",
        Some(Arc::new(|_o: Value, _to: &str| Err(
            "connection refused".into()
        )))
    ));
    let s = status_of(alpha(&client).get("m").await);
    assert!(
        s.message.contains("failed: connection refused"),
        "{}",
        s.message
    );
    at_v1(&client)
        .get("m")
        .await
        .expect("the storage version needs no webhook");
}

#[tokio::test]
async fn a_write_at_the_other_version_that_changes_nothing_stored_writes_nothing() {
    let (_server, client) = start_converting().await;
    let created = at_v1(&client)
        .create(
            &PostParams::default(),
            &ms_at("v1", "m", "llama", json!({"replicas": 1})),
        )
        .await
        .expect("create at v1");
    let mut events = at_v1(&client)
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &rv_of(&created.metadata).to_string(),
        )
        .await
        .expect("watch")
        .boxed();

    // Read at v1alpha1 and write back unchanged, three ways.
    let a = alpha(&client).get("m").await.expect("get at v1alpha1");
    let replaced = alpha(&client)
        .replace("m", &PostParams::default(), &a)
        .await
        .expect("replace at v1alpha1");
    let merged = alpha(&client)
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"model": "llama"}})),
        )
        .await
        .expect("merge patch at v1alpha1");
    for o in [&replaced, &merged] {
        assert_eq!(
            o.metadata.resource_version,
            created.metadata.resource_version
        );
        assert_eq!(o.metadata.generation, Some(1));
        assert_eq!(api_version(o), ALPHA);
    }
    let r = tokio::time::timeout(Duration::from_millis(300), events.try_next()).await;
    assert!(r.is_err(), "no watch event for a no-op write: {r:?}");

    // A real change at v1alpha1 bumps generation once; status does not.
    let changed = alpha(&client)
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"model": "mistral"}})),
        )
        .await
        .expect("change the model");
    assert_eq!(changed.metadata.generation, Some(2));
    let status = alpha(&client)
        .patch_status(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1}})),
        )
        .await
        .expect("status");
    assert_eq!(status.metadata.generation, Some(2));
}

#[tokio::test]
async fn deletes_answer_at_the_request_version() {
    let (_server, client) = start_converting().await;
    let mut held = ms_at("v1", "held", "llama", json!({}));
    held.metadata.finalizers = Some(vec!["example.dev/hold".into()]);
    at_v1(&client)
        .create(&PostParams::default(), &held)
        .await
        .expect("create held");
    at_v1(&client)
        .create(
            &PostParams::default(),
            &ms_at("v1", "gone", "phi", json!({})),
        )
        .await
        .expect("create gone");

    // With a finalizer the delete answers with the object, at v1alpha1.
    let d = alpha(&client)
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let o = d.left().expect("the terminating object");
    assert_eq!(
        (api_version(&o), &o.data["spec"]["model"]),
        (ALPHA, &json!("llama"))
    );
    assert!(o.metadata.deletion_timestamp.is_some());

    // A collection delete lists what it deleted at the request's version.
    let (code, body) = raw(&client, "DELETE", &path("v1alpha1", ""), None, "").await;
    assert_eq!(code, 200);
    assert_eq!(body["apiVersion"], ALPHA);
    let models: Vec<&Value> = body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| &i["spec"]["model"])
        .collect();
    assert_eq!(models, [&json!("phi"), &json!("llama")]);
}

#[tokio::test]
async fn without_a_converter_only_api_version_changes() {
    let (server, client) = crate::start().await;
    let mut o = crate::ms("m", json!({"model": "llama"}));
    if let Some(t) = o.types.as_mut() {
        t.api_version = ALPHA.into();
    }
    alpha(&client)
        .create(&PostParams::default(), &o)
        .await
        .expect("create at v1alpha1");
    let stored = server
        .get_object(GROUP, "modelservices", "default", "m")
        .expect("stored");
    assert_eq!(
        (stored["apiVersion"].as_str(), &stored["spec"]["model"]),
        (Some(STORED), &json!("llama"))
    );
    let b = at_v1(&client).get("m").await.expect("get at v1");
    assert_eq!(
        (api_version(&b), &b.data["spec"]["model"]),
        (STORED, &json!("llama"))
    );
}

#[tokio::test]
async fn discovery_lists_every_version_and_prefers_v1() {
    let (_server, client) = crate::start().await;
    let want_versions = json!([
        {"groupVersion": STORED, "version": "v1"},
        {"groupVersion": format!("{GROUP}/v1beta1"), "version": "v1beta1"},
        {"groupVersion": ALPHA, "version": "v1alpha1"},
    ]);
    let (_, groups) = raw(&client, "GET", "/apis", None, "").await;
    let group = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["name"] == GROUP)
        .cloned()
        .expect("the group is listed");
    assert_eq!(group["versions"], want_versions);
    assert_eq!(group["preferredVersion"]["version"], "v1");
    let (code, group) = raw(&client, "GET", &format!("/apis/{GROUP}"), None, "").await;
    assert_eq!((code, &group["versions"]), (200, &want_versions));
    assert_eq!(group["preferredVersion"]["groupVersion"], STORED);
    for v in ["v1alpha1", "v1beta1", "v1"] {
        let (code, list) = raw(&client, "GET", &format!("/apis/{GROUP}/{v}"), None, "").await;
        assert_eq!(code, 200);
        let names: Vec<&str> = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "modelservices",
                "modelservices/status",
                "modelservices/scale"
            ]
        );
    }
    let (code, _) = raw(&client, "GET", &format!("/apis/{GROUP}/v2"), None, "").await;
    assert_eq!(code, 404);

    // kube's own discovery agrees.
    let g = kube::discovery::group(&client, GROUP)
        .await
        .expect("discovery");
    assert_eq!(g.preferred_version_or_latest(), "v1");
    assert_eq!(
        g.versions().collect::<Vec<_>>(),
        ["v1", "v1beta1", "v1alpha1"]
    );
}
