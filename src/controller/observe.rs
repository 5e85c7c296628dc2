//! Step 1, observe: children from the reflector caches, pods on demand.
//!
//! Pods are listed only while the Deployment is not complete (see
//! `core::status::needs_pods`): caching every serving pod would cost more memory
//! than everything else the operator holds, for information that only matters
//! while something is wrong.

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource};
use std::sync::Arc;

use super::{Context, Error};
use crate::core::labels::selector_string;
use crate::core::tracks::TRACK_LABEL;

/// The cached child named `name` in `namespace`, if the cache has one.
pub fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// The pods of one ModelService, read-only, straight from the API server;
/// with `track`, those of one track only.
pub async fn pods(
    ctx: &Context,
    namespace: &str,
    name: &str,
    track: Option<&str>,
) -> Result<Vec<Pod>, Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let mut selector = selector_string(name);
    if let Some(t) = track {
        selector.push_str(&format!(",{TRACK_LABEL}={t}"));
    }
    api.list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .map_err(|e| Error::kube(format!("listing pods of {namespace}/{name}"), e))
}
