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
//!
//! "Caught up" is decided by the cache's [`Freshness`], not by the object
//! alone: an object missing from a cache that has seen events past our
//! write was deleted, and the memo must not stand in for it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use super::freshness::{Freshness, parse};

/// What we last wrote to one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<T> {
    pub resource_version: u64,
    pub at: Instant,
    pub value: T,
}

/// Recent writes by key (kind/namespace/name).
///
/// Values are boxed and the table shrinks as it empties: a cold start of
/// 10,000 ModelServices has thousands of writes outstanding at once, and a
/// table of inline statuses (over 500 bytes a bucket, empty buckets
/// included) kept its peak size for the whole run (BENCHMARKS.md, "Where
/// the 10,000 ModelServices' memory goes").
#[derive(Debug)]
pub struct Recent<T> {
    map: Mutex<HashMap<String, Box<Written<T>>>>,
}

/// Below this many buckets a table is not worth shrinking.
const SMALL_TABLE: usize = 64;

/// Removes `key`, and gives the table's memory back once it is under a
/// quarter full (to half full, so that the next few inserts do not grow it
/// again at once).
fn remove_and_shrink<V>(m: &mut HashMap<String, V>, key: &str) {
    m.remove(key);
    if m.capacity() > SMALL_TABLE && m.len() * 4 < m.capacity() {
        m.shrink_to(m.len() * 2);
    }
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

impl<T: Clone> Recent<T> {
    /// Remembers a write that produced `resource_version`.
    pub fn record(&self, key: &str, resource_version: Option<&str>, value: T) {
        if let (Some(rv), Ok(mut m)) = (resource_version.and_then(parse), self.map.lock()) {
            m.insert(
                key.to_string(),
                Box::new(Written {
                    resource_version: rv,
                    at: Instant::now(),
                    value,
                }),
            );
        }
    }

    /// Our write, if the cache (whose progress is `fresh`, holding the
    /// object at `cached_rv`, `None` when it does not hold it) has not seen
    /// it yet; forgets it once the cache has.
    pub fn newer_than_cache(
        &self,
        key: &str,
        cached_rv: Option<&str>,
        fresh: &Freshness,
    ) -> Option<T> {
        let mut m = self.map.lock().ok()?;
        let w = m.get(key)?;
        let object_behind = match cached_rv {
            None => true,
            Some(rv) => parse(rv).is_some_and(|c| c < w.resource_version),
        };
        let behind = object_behind && !fresh.covers(w.resource_version, w.at);
        if behind {
            Some(w.value.clone())
        } else {
            remove_and_shrink(&mut m, key);
            None
        }
    }

    /// Our write, with the resourceVersion it produced, while `object_rv`
    /// (the object a reconcile holds) is older than it; forgets it once the
    /// object is not.
    ///
    /// For the object a reconcile was handed, not for a cache lookup: the
    /// Controller hands a reconcile the object as it was when the reconcile
    /// started, and the cache may catch up while the reconcile runs. Asking
    /// the cache's progress (as [`Recent::newer_than_cache`] does) would then
    /// drop our write while the reconcile still reads the older copy, and
    /// the reconcile would act on a status it had already replaced.
    pub fn newer_than_object(&self, key: &str, object_rv: Option<&str>) -> Option<(u64, T)> {
        let mut m = self.map.lock().ok()?;
        let w = m.get(key)?;
        let behind = match object_rv {
            None => true,
            Some(rv) => parse(rv).is_some_and(|o| o < w.resource_version),
        };
        if behind {
            Some((w.resource_version, w.value.clone()))
        } else {
            remove_and_shrink(&mut m, key);
            None
        }
    }

    /// Forgets an object (deleted).
    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.map.lock() {
            remove_and_shrink(&mut m, key);
        }
    }

    /// Buckets the table holds (for the test of its shrinking).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.map.lock().map(|m| m.capacity()).unwrap_or(0)
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
            "apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"model": {"name": "x"}, "runtime": {"image": "i"}}
        }))
        .unwrap();
        assert_eq!(key_of(&ms), "ModelService/ns/m");
        assert_eq!(key_of(&ms), key("ModelService", "ns", "m"));
    }

    #[test]
    fn stands_in_until_the_cache_catches_up() {
        let r: Recent<&str> = Recent::default();
        let fresh = Freshness::default();
        r.record("k", Some("10"), "ours");
        assert_eq!(r.newer_than_cache("k", Some("9"), &fresh), Some("ours"));
        assert_eq!(r.newer_than_cache("k", None, &fresh), Some("ours"));
        assert_eq!(r.newer_than_cache("k", Some("10"), &fresh), None);
        assert!(r.is_empty(), "forgotten once the cache has it");
        assert_eq!(r.newer_than_cache("k", Some("9"), &fresh), None);
    }

    /// The bug: created, then deleted before the cache showed it, the child
    /// was taken as present forever and never recreated.
    #[test]
    fn a_deletion_the_watch_delivered_ends_the_stand_in() {
        use k8s_openapi::api::apps::v1::Deployment;
        use kube::runtime::watcher::Event;
        let r: Recent<&str> = Recent::default();
        let fresh = Freshness::default();
        r.record("Deployment/ns/m", Some("10"), "ours");
        let mut gone = Deployment::default();
        gone.metadata.resource_version = Some("11".into());
        fresh.observe(&Event::Apply(gone.clone()));
        fresh.observe(&Event::Delete(gone));
        assert_eq!(r.newer_than_cache("Deployment/ns/m", None, &fresh), None);
        assert!(r.is_empty());
    }

    /// The bug behind a second `CanaryRolledBack`: the cache caught up while
    /// a reconcile held an older copy of the object, our write was dropped,
    /// and the reconcile compared against the status it had replaced.
    #[test]
    fn the_object_a_reconcile_holds_is_judged_by_its_own_version_not_the_cache() {
        use crate::api::ModelService;
        use kube::runtime::watcher::Event;
        let r: Recent<&str> = Recent::default();
        let fresh = Freshness::default();
        r.record("ModelService/ns/m", Some("42"), "ours");
        let echo: ModelService = serde_json::from_value(serde_json::json!({
            "apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
            "metadata": {"name": "m", "namespace": "ns", "resourceVersion": "42"},
            "spec": {"model": {"name": "x"}, "runtime": {"image": "i"}}
        }))
        .expect("ModelService");
        fresh.observe(&Event::Apply(echo));
        assert_eq!(
            r.newer_than_object("ModelService/ns/m", Some("36")),
            Some((42, "ours")),
            "the reconcile's copy is older than our write, whatever the cache has"
        );
        assert_eq!(r.newer_than_object("ModelService/ns/m", Some("42")), None);
        assert!(r.is_empty(), "forgotten once the object has it");
    }

    /// The bug: after a burst of writes the table kept the burst's size
    /// for the rest of the run.
    #[test]
    fn the_table_gives_its_memory_back_as_it_empties() {
        let r: Recent<u32> = Recent::default();
        let fresh = Freshness::default();
        for i in 0..10_000u32 {
            r.record(&format!("k{i}"), Some("10"), i);
        }
        let burst = r.capacity();
        assert!(burst >= 10_000);
        for i in 0..9_990u32 {
            assert_eq!(
                r.newer_than_cache(&format!("k{i}"), Some("10"), &fresh),
                None
            );
        }
        assert_eq!(r.len(), 10);
        assert!(
            r.capacity() <= SMALL_TABLE * 2,
            "{} buckets for 10 writes",
            r.capacity()
        );
        for i in 9_990..10_000u32 {
            assert_eq!(
                r.newer_than_cache(&format!("k{i}"), Some("9"), &fresh),
                Some(i)
            );
        }
    }

    #[test]
    fn opaque_resource_versions_disable_the_shortcut() {
        let r: Recent<&str> = Recent::default();
        let fresh = Freshness::default();
        r.record("k", Some("abc"), "ours");
        assert_eq!(r.newer_than_cache("k", Some("1"), &fresh), None);
        r.record("k", Some("5"), "ours");
        assert_eq!(r.newer_than_cache("k", Some("xyz"), &fresh), None);
    }
}
