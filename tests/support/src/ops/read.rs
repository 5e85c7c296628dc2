//! GET and LIST: consistent snapshots taken under the store lock.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::Ctx;
use crate::selector::Filter;
use crate::status::ApiError;
use crate::store::Store;

pub fn get(store: &Store, ctx: &Ctx, name: &str) -> Result<Arc<Value>, ApiError> {
    store
        .get(&ctx.key(name))
        .ok_or_else(|| ApiError::not_found(&ctx.info, name))
}

/// Matching objects and the resourceVersion they are consistent with.
pub struct Snapshot {
    pub kind: String,
    pub api_version: String,
    pub resource_version: u64,
    pub items: Vec<Arc<Value>>,
    /// Whether each item keeps its `kind` and `apiVersion`: a real API
    /// server leaves them out of the items of a built-in type's list (the
    /// list's own kind says it) and keeps them for custom resources.
    pub typed_items: bool,
}

/// The current matching objects. `limit`/`continue` are not honoured: one
/// page is always a consistent snapshot, which is what paginating clients
/// (kube-runtime's watcher) need for a correct list-then-watch.
pub fn list(store: &Store, ctx: &Ctx, filter: &Filter) -> Snapshot {
    let items = store
        .resources
        .get(&ctx.info.key())
        .map(|s| {
            s.objects
                .values()
                .filter(|o| filter.matches(o))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    Snapshot {
        kind: format!("{}List", ctx.info.kind),
        api_version: ctx.info.api_version(),
        resource_version: store.rv,
        items,
        typed_items: ctx.info.custom,
    }
}

#[derive(Serialize)]
struct ListBody<'a> {
    kind: &'a str,
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    metadata: Map<String, Value>,
    items: Vec<&'a Value>,
}

impl Snapshot {
    /// The `XList` JSON body (`PartialObjectMetadataList` when `partial`).
    pub fn to_json(&self, partial: bool) -> Vec<u8> {
        let mut metadata = Map::new();
        metadata.insert(
            "resourceVersion".into(),
            Value::String(self.resource_version.to_string()),
        );
        if partial {
            let items: Vec<Value> = self
                .items
                .iter()
                .map(|o| crate::http::partial_object(o))
                .collect();
            let body = ListBody {
                kind: "PartialObjectMetadataList",
                api_version: "meta.k8s.io/v1",
                metadata,
                items: items.iter().collect(),
            };
            return serde_json::to_vec(&body).unwrap_or_default();
        }
        let untyped: Vec<Value> = if self.typed_items {
            Vec::new()
        } else {
            self.items
                .iter()
                .map(|o| {
                    let mut o = (**o).clone();
                    if let Some(m) = o.as_object_mut() {
                        m.remove("kind");
                        m.remove("apiVersion");
                    }
                    o
                })
                .collect()
        };
        let items = if self.typed_items {
            self.items.iter().map(|a| a.as_ref()).collect()
        } else {
            untyped.iter().collect()
        };
        let body = ListBody {
            kind: &self.kind,
            api_version: &self.api_version,
            metadata,
            items,
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }
}
