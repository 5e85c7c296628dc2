//! Metadata-only responses (`Accept: ...;as=PartialObjectMetadata`).
//!
//! kube's `metadata_watcher` and `Api::get_metadata`/`list_metadata` ask for
//! this representation; the real server strips everything but `metadata`,
//! so the fake does too (an operator must not rely on fields it did not get).

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

/// Whether the client asked for PartialObjectMetadata(List).
pub fn wants_partial(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=PartialObjectMetadata"))
}

/// The metadata-only form of an object.
pub fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}
