//! Per-(verb, resource) request counters.
//!
//! Benchmarks and "no write storm" tests assert on how many requests the
//! operator sent; verbs follow the Kubernetes audit vocabulary so the numbers
//! compare directly with a real cluster's audit log.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Request verbs as in Kubernetes audit logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    /// DELETE on a collection URL.
    DeleteCollection,
}

impl Verb {
    /// The audit-log spelling (`get`, `list`, ..., `deletecollection`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// Whether the verb can change stored state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

/// A snapshot of the counters, taken by [`crate::FakeApiServer::counts`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    map: BTreeMap<(Verb, String), u64>,
}

impl RequestCounts {
    /// Requests of `verb` on `resource` (plural, with `/status` or `/scale`
    /// for subresources).
    pub fn get(&self, verb: Verb, resource: &str) -> u64 {
        self.map
            .get(&(verb, resource.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Create, update, patch and delete requests over all resources.
    pub fn writes(&self) -> u64 {
        self.writes_excluding(&[])
    }

    /// Writes, ignoring resources in `resources`; a plural also excludes its
    /// subresources (`"leases"` excludes nothing else, `"modelservices"`
    /// excludes `"modelservices/status"` too).
    pub fn writes_excluding(&self, resources: &[&str]) -> u64 {
        self.map
            .iter()
            .filter(|((verb, res), _)| {
                verb.is_write() && {
                    let base = res.split('/').next().unwrap_or(res);
                    !resources.iter().any(|r| *r == res || *r == base)
                }
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests counted here but not in `earlier`, by (verb, resource).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        let map = self
            .map
            .iter()
            .filter_map(|(k, n)| {
                let d = n.saturating_sub(earlier.map.get(k).copied().unwrap_or(0));
                (d > 0).then(|| (k.clone(), d))
            })
            .collect();
        RequestCounts { map }
    }

    /// Every request counted.
    pub fn total(&self) -> u64 {
        self.map.values().sum()
    }

    /// Every (verb, resource) seen, with its count, in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = ((Verb, String), u64)> + '_ {
        self.map.iter().map(|(k, v)| (k.clone(), *v))
    }
}

/// The live, shared counters.
#[derive(Default)]
pub(crate) struct Counter {
    map: Mutex<BTreeMap<(Verb, String), u64>>,
}

impl Counter {
    pub fn record(&self, verb: Verb, resource: &str) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(&(verb, resource.to_string())) {
            Some(n) => *n += 1,
            None => {
                map.insert((verb, resource.to_string()), 1);
            }
        }
    }

    pub fn snapshot(&self) -> RequestCounts {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        RequestCounts { map: map.clone() }
    }

    pub fn reset(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_excluding_covers_subresources() {
        let c = Counter::default();
        c.record(Verb::Patch, "modelservices/status");
        c.record(Verb::Update, "leases");
        c.record(Verb::Create, "deployments");
        c.record(Verb::Get, "deployments");
        let s = c.snapshot();
        assert_eq!(s.writes(), 3);
        assert_eq!(s.writes_excluding(&["leases"]), 2);
        assert_eq!(s.writes_excluding(&["leases", "modelservices"]), 1);
        assert_eq!(s.total(), 4);
        assert_eq!(s.get(Verb::Patch, "modelservices/status"), 1);
        assert_eq!(s.iter().count(), 4);
    }
}
