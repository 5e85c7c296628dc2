//! Behaviour tests of the fake API server, driven through real kube clients.
//!
//! One test binary (modules below) keeps link time down.

mod controller;
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
mod watches;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use kube::core::Status;
use kube::{Api, Client};

/// A fresh server and an in-process client.
pub async fn start() -> (FakeApiServer, Client) {
    let server = FakeApiServer::start().await;
    let client = server.client();
    (server, client)
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
        &GroupVersionKind::gvk("serving.modelservice.dev", "v1alpha1", "ModelService"),
        "modelservices",
    )
}

/// `Api<DynamicObject>` for ModelServices in `ns`.
pub fn ms_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ms_resource())
}

/// A ModelService object with the given spec.
pub fn ms(name: &str, spec: serde_json::Value) -> DynamicObject {
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
