//! Children already known to hold what we apply, by resourceVersion.
//!
//! Deciding whether a cached child still holds every field we set
//! (`core::subset`) means turning its spec into JSON, for every child, in
//! every reconcile. A child whose resourceVersion has not moved since it was
//! found (or made, by our own apply) to hold a desired object still holds
//! it, so the comparison runs once per change of the child instead of once
//! per reconcile. Any write to the child (a hand edit, another controller)
//! changes its resourceVersion and brings the comparison back.
//!
//! Entries go with their ModelService's cleanup (and with a deleted HPA).
//! One whose finalizer was removed by hand, so that no cleanup ran, leaves up
//! to three small entries until the operator restarts.

use std::collections::HashMap;
use std::sync::Mutex;

/// Per child key (see `recent::key`): the resourceVersion and the
/// fingerprint of the desired object it was checked against.
#[derive(Debug, Default)]
pub struct Verified {
    map: Mutex<HashMap<String, Check>>,
}

/// One child's last successful check.
#[derive(Debug)]
struct Check {
    resource_version: Box<str>,
    fingerprint: Box<str>,
}

impl Verified {
    /// Whether the child at `resource_version` was seen to hold the desired
    /// object with `fingerprint`.
    pub fn holds(&self, key: &str, resource_version: Option<&str>, fingerprint: &str) -> bool {
        let Some(rv) = resource_version else {
            return false;
        };
        self.map.lock().is_ok_and(|m| {
            m.get(key)
                .is_some_and(|c| &*c.resource_version == rv && &*c.fingerprint == fingerprint)
        })
    }

    /// Remembers that the child at `resource_version` holds the desired
    /// object with `fingerprint`.
    pub fn remember(&self, key: &str, resource_version: Option<&str>, fingerprint: &str) {
        if let (Some(rv), Ok(mut m)) = (resource_version, self.map.lock()) {
            let check = Check {
                resource_version: rv.into(),
                fingerprint: fingerprint.into(),
            };
            m.insert(key.to_string(), check);
        }
    }

    /// Forgets a child (its owner is gone).
    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Verified;

    #[test]
    fn holds_only_for_the_same_resource_version_and_fingerprint() {
        let v = Verified::default();
        assert!(!v.holds("Deployment/ns/m", Some("5"), "f1"));
        v.remember("Deployment/ns/m", Some("5"), "f1");
        assert!(v.holds("Deployment/ns/m", Some("5"), "f1"));
        assert!(
            !v.holds("Deployment/ns/m", Some("6"), "f1"),
            "the child changed"
        );
        assert!(
            !v.holds("Deployment/ns/m", Some("5"), "f2"),
            "the spec changed"
        );
        assert!(!v.holds("Deployment/ns/m", None, "f1"));
        assert!(!v.holds("Service/ns/m", Some("5"), "f1"));
        v.forget("Deployment/ns/m");
        assert!(!v.holds("Deployment/ns/m", Some("5"), "f1"));
    }

    #[test]
    fn an_unversioned_child_is_never_remembered() {
        let v = Verified::default();
        v.remember("Deployment/ns/m", None, "f1");
        assert!(!v.holds("Deployment/ns/m", Some(""), "f1"));
    }
}
