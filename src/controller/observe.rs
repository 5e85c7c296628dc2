//! Step 1, observe: children and pods from the reflector caches.
//!
//! Pods are read only while the Deployment is not complete (see
//! `core::status::needs_pods`): only then can they explain something.

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;

use super::Context;
pub use super::pods::Track;

/// The cached child named `name` in `namespace`, if the cache has one.
pub fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// The pods of one ModelService of `track`, from the pod cache (see `pods`).
pub fn pods(ctx: &Context, namespace: &str, name: &str, track: Track<'_>) -> Vec<Pod> {
    let stores = &ctx.stores;
    super::pods::of(
        &stores.pods.store,
        &stores.pod_index,
        namespace,
        name,
        track,
    )
}
