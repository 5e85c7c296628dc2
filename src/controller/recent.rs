//! Our own recent writes, remembered until the watch caches catch up.
//!
//! A reconcile triggered by our own write often runs before the watch event
//! of that write reaches the cache, so the cache still shows the old child or
//! status and the write would be repeated. We remember, per object, the
//! resourceVersion our write produced and a fingerprint of what we wrote;
//! while the cache is older than that, the remembered write stands in for it.
//! Entries go as soon as the cache catches up, so this holds almost nothing
//! in steady state. resourceVersions are compared as numbers, which is what
//! every API server in practice hands out; one that is not a number simply
//! disables the shortcut (a repeated write, never a missed one).

use std::collections::HashMap;
use std::sync::Mutex;

/// What we last wrote to one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<T> {
    pub resource_version: u64,
    pub value: T,
}

/// Recent writes by key (kind/namespace/name).
#[derive(Debug)]
pub struct Recent<T> {
    map: Mutex<HashMap<String, Written<T>>>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }
}

/// The key of one object: `kind/namespace/name`.
pub fn key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// The key of `obj` itself.
pub fn key_of<K: kube::Resource<DynamicType = ()>>(obj: &K) -> String {
    let meta = obj.meta();
    key(
        &K::kind(&()),
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn parse(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

impl<T: Clone> Recent<T> {
    /// Remembers a write that produced `resource_version`.
    pub fn record(&self, key: &str, resource_version: Option<&str>, value: T) {
        if let (Some(rv), Ok(mut m)) = (parse(resource_version), self.map.lock()) {
            m.insert(
                key.to_string(),
                Written {
                    resource_version: rv,
                    value,
                },
            );
        }
    }

    /// Our write, if the cache (at `cached_rv`, `None` when the object is not
    /// cached) has not seen it yet; forgets it once the cache has.
    pub fn newer_than_cache(&self, key: &str, cached_rv: Option<&str>) -> Option<T> {
        let mut m = self.map.lock().ok()?;
        let w = m.get(key)?;
        let behind = match cached_rv {
            None => true,
            Some(rv) => parse(Some(rv)).is_some_and(|c| c < w.resource_version),
        };
        if behind {
            Some(w.value.clone())
        } else {
            m.remove(key);
            None
        }
    }

    /// Forgets an object (deleted).
    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(key);
        }
    }

    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_keyed_by_its_kind_namespace_and_name() {
        let ms: crate::api::ModelService = serde_json::from_value(serde_json::json!({
            "apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"model": "x", "image": "i"}
        }))
        .unwrap();
        assert_eq!(key_of(&ms), "ModelService/ns/m");
        assert_eq!(key_of(&ms), key("ModelService", "ns", "m"));
    }

    #[test]
    fn stands_in_until_the_cache_catches_up() {
        let r: Recent<&str> = Recent::default();
        r.record("k", Some("10"), "ours");
        assert_eq!(r.newer_than_cache("k", Some("9")), Some("ours"));
        assert_eq!(r.newer_than_cache("k", None), Some("ours"));
        assert_eq!(r.newer_than_cache("k", Some("10")), None);
        assert!(r.is_empty(), "forgotten once the cache has it");
        assert_eq!(r.newer_than_cache("k", Some("9")), None);
    }

    #[test]
    fn opaque_resource_versions_disable_the_shortcut() {
        let r: Recent<&str> = Recent::default();
        r.record("k", Some("abc"), "ours");
        assert_eq!(r.newer_than_cache("k", Some("1")), None);
        r.record("k", Some("5"), "ours");
        assert_eq!(r.newer_than_cache("k", Some("xyz")), None);
    }
}
