//! GET and LIST: consistent snapshots taken under the store lock.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::Ctx;
use crate::selector::Filter;
use crate::status::ApiError;
use crate::store::Store;

/// The object at the request's version.
pub fn get(store: &Store, ctx: &Ctx, name: &str) -> Result<Arc<Value>, ApiError> {
    Ok(ctx.load(store, name)?.view)
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
    /// Set when the list was cut at `limit`: the token of the next page.
    pub continue_token: Option<String>,
    /// With `continue_token`: how many items the later pages hold.
    pub remaining: usize,
}

/// The rest of paginated lists, by continue token. A real server serves a
/// continued list from the same etcd revision as its first page, so every
/// page is one consistent snapshot; the fake keeps the rest of the snapshot
/// instead. The oldest are dropped past a bound, and a dropped token is
/// answered as a real server answers a compacted one: 410 Gone.
#[derive(Default)]
pub struct Pages {
    inner: std::sync::Mutex<PagesInner>,
}

#[derive(Default)]
struct PagesInner {
    next_id: u64,
    rest: std::collections::BTreeMap<u64, Snapshot>,
    /// The most items one list response held, by resource.
    largest: std::collections::BTreeMap<String, usize>,
}

/// Continue tokens kept at once.
const PAGES_KEPT: usize = 256;

impl Pages {
    /// Cuts `snapshot` after `limit` items, keeping the rest for its token.
    pub fn cut(&self, mut snapshot: Snapshot, limit: usize) -> Snapshot {
        if limit == 0 || snapshot.items.len() <= limit {
            return snapshot;
        }
        let rest_items = snapshot.items.split_off(limit);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.next_id += 1;
        let id = inner.next_id;
        let rest = Snapshot {
            kind: snapshot.kind.clone(),
            api_version: snapshot.api_version.clone(),
            resource_version: snapshot.resource_version,
            remaining: 0,
            continue_token: None,
            typed_items: snapshot.typed_items,
            items: rest_items,
        };
        snapshot.remaining = rest.items.len();
        snapshot.continue_token = Some(format!("{}-{id}", snapshot.resource_version));
        inner.rest.insert(id, rest);
        while inner.rest.len() > PAGES_KEPT {
            inner.rest.pop_first();
        }
        snapshot
    }

    /// Notes that a list response of `resource` held `items` objects.
    pub fn served(&self, resource: &str, items: usize) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let largest = inner.largest.entry(resource.to_string()).or_default();
        *largest = (*largest).max(items);
    }

    /// The most objects one list response of `resource` has held.
    pub fn largest(&self, resource: &str) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.largest.get(resource).copied().unwrap_or(0)
    }

    /// The rest of the list that `token` continues, or 410 Gone.
    pub fn resume(&self, token: &str) -> Result<Snapshot, ApiError> {
        let id = token
            .rsplit_once('-')
            .and_then(|(_, id)| id.parse::<u64>().ok())
            .ok_or_else(|| ApiError::bad_request(format!("invalid continue token: {token}")))?;
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rest
            .remove(&id)
            .ok_or_else(|| {
                ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                )
            })
    }
}

/// The stored objects `filter` selects, in key order (namespace, name), as
/// etcd returns them. Selectors see the stored objects, not their
/// conversions.
pub fn matching(store: &Store, ctx: &Ctx, filter: &Filter) -> Vec<Arc<Value>> {
    store
        .resources
        .get(&ctx.info.key())
        .map(|s| {
            s.objects
                .values()
                .filter(|o| filter.matches(o))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The current matching objects, as stored; [`Snapshot::at_request_version`]
/// converts them (outside the store lock). Pagination (`limit`/`continue`)
/// is [`Pages`].
pub fn list(store: &Store, ctx: &Ctx, filter: &Filter) -> Snapshot {
    let items = matching(store, ctx, filter);
    Snapshot {
        kind: format!("{}List", ctx.info.kind),
        api_version: ctx.info.api_version(),
        resource_version: store.rv,
        items,
        typed_items: ctx.info.custom,
        continue_token: None,
        remaining: 0,
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
    /// The list at the request's version: every item converted (one failed
    /// conversion fails the whole list, as on a real server).
    pub fn at_request_version(mut self, ctx: &Ctx) -> Result<Snapshot, ApiError> {
        for item in self.items.iter_mut() {
            *item = ctx.to_request(item)?;
        }
        self.api_version = ctx.api_version.clone();
        Ok(self)
    }

    /// The `XList` JSON body (`PartialObjectMetadataList` when `partial`).
    pub fn to_json(&self, partial: bool) -> Vec<u8> {
        let mut metadata = Map::new();
        metadata.insert(
            "resourceVersion".into(),
            Value::String(self.resource_version.to_string()),
        );
        if let Some(token) = &self.continue_token {
            metadata.insert("continue".into(), Value::String(token.clone()));
            metadata.insert("remainingItemCount".into(), Value::from(self.remaining));
        }
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
