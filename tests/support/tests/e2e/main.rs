//! Behaviour tests of the fake API server, driven through real kube clients.
//!
//! One test binary (modules below) keeps link time down.

mod controller;
mod crds;
mod crud;
mod faults;
mod finalizers;
mod gc;
mod patches;
mod runtime;
mod scale_perf;
mod selectors;
mod ssa;
mod subresources;
mod versions;
mod watches;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use kube::core::Status;
use kube::{Api, Client};

/// A fresh server and an in-process client: for the tests that need the
/// fake itself (fault injection, request counts, its own knobs).
pub async fn start() -> (FakeApiServer, Client) {
    let server = FakeApiServer::start().await;
    let client = server.client();
    (server, client)
}

/// Where a test of API semantics runs: the fake (default), or with
/// `MODELSERVICE_E2E=1` the real API server of the current kubeconfig, in a
/// fresh namespace that the client defaults to. The assertions are the same
/// on both; where the real server disagrees, the fake is wrong.
pub enum Backend {
    Fake(#[allow(dead_code)] FakeApiServer),
    Real,
}

pub async fn start_either() -> (Backend, Client) {
    if std::env::var("MODELSERVICE_E2E").is_ok_and(|v| v == "1") {
        let client = real_client().await;
        (Backend::Real, client)
    } else {
        let (server, client) = start().await;
        (Backend::Fake(server), client)
    }
}

/// The ConfigMap a real cluster's kube-controller-manager publishes into
/// every namespace. The fake is an API server only, so it has none; tests
/// of ConfigMaps look past it.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// Whether `cm` is the test's own, not [`ROOT_CA`].
pub fn ours(cm: &ConfigMap) -> bool {
    cm.metadata.name.as_deref() != Some(ROOT_CA)
}

/// The namespace a test's objects live in (`default` on the fake).
pub fn ns(client: &Client) -> &str {
    client.default_namespace()
}

async fn real_client() -> Client {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams, PostParams};
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    let namespace = format!("fake-diff-{:08x}", h.finish() as u32);
    let mut config = kube::Config::infer()
        .await
        .expect("MODELSERVICE_E2E=1 needs a working kubeconfig");
    config.default_namespace = namespace.clone();
    let client = Client::try_from(config).expect("a client for the kubeconfig");
    let crd_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds/modelservice.yaml");
    let text = std::fs::read_to_string(&crd_path).expect("crds/modelservice.yaml");
    let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("the CRD parses");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let live = crds
        .get_opt("modelservices.serving.modelservice.dev")
        .await
        .ok()
        .flatten();
    // A CRD that serves these versions already is left alone, and its
    // conversion stanza is never ours: the operator keeps it.
    let current = live.as_ref().is_some_and(|l| {
        serde_json::to_value(&l.spec.versions).ok() == serde_json::to_value(&crd.spec.versions).ok()
    });
    if !current {
        crd.spec.conversion = live.and_then(|l| l.spec.conversion);
        crds.patch(
            "modelservices.serving.modelservice.dev",
            &PatchParams::apply("fake-diff").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("install the ModelService CRD");
    }
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": namespace, "labels": {"modelservice.dev/e2e": "true"}}}))
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create the test namespace");
    eventually_within(
        Duration::from_secs(30),
        "the ModelService API to be served",
        || {
            let api = ms_api(&client, &namespace);
            async move { api.list(&Default::default()).await.ok().map(|_| ()) }
        },
    )
    .await;
    client
}

pub fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

pub fn ms_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("serving.modelservice.dev", "v1", "ModelService"),
        "modelservices",
    )
}

/// `Api<DynamicObject>` for ModelServices in `ns`.
pub fn ms_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ms_resource())
}

/// A ModelService object (v1, the storage version, so a real server
/// needs no conversion webhook for it) with the given spec, plus the
/// `model` and `runtime` its schema requires when the spec leaves them out
/// (a real server refuses the object without them; the fake has no schema).
pub fn ms(name: &str, mut spec: serde_json::Value) -> DynamicObject {
    if let Some(m) = spec.as_object_mut() {
        m.entry("model")
            .or_insert_with(|| serde_json::json!({"name": "m"}));
        m.entry("runtime")
            .or_insert_with(|| serde_json::json!({"image": "i"}));
    }
    let mut o = DynamicObject::new(name, &ms_resource());
    o.data = serde_json::json!({ "spec": spec });
    o
}

/// The Status of a failed call (panics on success or non-API errors).
pub fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `f` until it returns Some, for up to 5 seconds.
pub async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_within(Duration::from_secs(5), what, f).await
}

/// Polls `f` until it returns Some, for up to `limit`.
pub async fn eventually_within<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn rv_of(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|s| s.parse().ok())
        .expect("numeric resourceVersion")
}

/// Sends a raw request; returns the HTTP code and the body (JSON when it
/// parses, else a JSON string of the text).
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, serde_json::Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let req = req
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .expect("valid request");
    let resp = client.send(req).await.expect("transport works");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.expect("body");
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into()));
    (code, value)
}

/// GET with an explicit Accept header; returns code and JSON body.
pub async fn raw_with_accept(
    client: &Client,
    path: &str,
    accept: &str,
) -> (u16, serde_json::Value) {
    let req = http::Request::builder()
        .method("GET")
        .uri(path)
        .header("accept", accept)
        .body(kube::client::Body::from(Vec::new()))
        .expect("valid request");
    let resp = client.send(req).await.expect("transport works");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.expect("body");
    (code, serde_json::from_slice(&bytes).unwrap_or_default())
}
