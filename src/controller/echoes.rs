//! Our own writes, coming back through the watches: they start no reconcile.
//!
//! Every write of the operator (a child applied, the finalizer added, a
//! status written) comes back as a watch event, and each such event queued
//! one more reconcile of its ModelService, which then found nothing to do:
//! at 10,000 ModelServices that was most of the 11 reconciles per object of
//! a cold start, each waiting for a slot. The reconcile that wrote already
//! acted on what its write returned, so the event of exactly the
//! resourceVersion our write produced is dropped from the triggers (the
//! caches still take it). Anyone else's change, even of the same object a
//! moment later, has another resourceVersion and starts a reconcile as
//! before. Only a write's own response is remembered here, never a version
//! read back: that one may carry someone else's change. A ModelService
//! write's response is remembered only when its generation is the one the
//! reconcile acted on: a status patch goes through whatever spec was stored
//! meanwhile, and after a watch outage the relist shows only the latest
//! version, so taking it for our echo would leave the new spec unreconciled
//! (found by the outage scenario on the real control plane).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::{Resource, ResourceExt};

use super::freshness::parse;
use super::recent;

/// Writes of one object whose events may still come: a reconcile writes a
/// ModelService twice at most (finalizer, status), a child once.
const KEPT: usize = 4;

/// The resourceVersions our writes produced, by object, until their events
/// come back. One whose event never comes (a relist in between) goes with
/// the object's next event past it, or with the object.
#[derive(Debug, Default)]
pub struct Echoes(Mutex<HashMap<String, Vec<u64>>>);

impl Echoes {
    /// Our write of `key` produced `resource_version`.
    pub fn wrote(&self, key: &str, resource_version: Option<&str>) {
        if let (Some(rv), Ok(mut m)) = (resource_version.and_then(parse), self.0.lock()) {
            let ours = m.entry(key.to_string()).or_default();
            if ours.len() == KEPT {
                ours.remove(0);
            }
            ours.push(rv);
        }
    }

    /// Whether an event of `key` at `resource_version` is our write coming
    /// back. Events come in order: ours older than it will not come.
    pub fn came_back(&self, key: &str, resource_version: Option<&str>) -> bool {
        let (Some(rv), Ok(mut m)) = (resource_version.and_then(parse), self.0.lock()) else {
            return false;
        };
        let Some(ours) = m.get_mut(key) else {
            return false;
        };
        let echo = ours.contains(&rv);
        ours.retain(|o| *o > rv);
        if ours.is_empty() {
            m.remove(key);
        }
        echo
    }

    /// Whether `obj`'s event is our write coming back.
    pub fn of<K: Resource<DynamicType = ()>>(&self, obj: &K) -> bool {
        let key = recent::key(
            &K::kind(&()),
            &obj.namespace().unwrap_or_default(),
            &obj.name_any(),
        );
        self.came_back(&key, obj.meta().resource_version.as_deref())
    }

    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(key);
        }
    }

    pub fn len(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_version_our_write_produced_is_an_echo() {
        let e = Echoes::default();
        e.wrote("Deployment/ns/m", Some("10"));
        assert!(
            !e.came_back("Deployment/ns/m", Some("9")),
            "an older event is someone's"
        );
        assert!(!e.came_back("Deployment/ns/other", Some("10")));
        assert!(e.came_back("Deployment/ns/m", Some("10")));
        assert!(
            !e.came_back("Deployment/ns/m", Some("10")),
            "the same event twice (a relist) starts a reconcile"
        );
        assert!(e.is_empty());
    }

    #[test]
    fn an_event_past_our_write_ends_the_wait_for_its_echo() {
        let e = Echoes::default();
        e.wrote("k", Some("10"));
        assert!(
            !e.came_back("k", Some("12")),
            "someone else's change after ours"
        );
        assert!(e.is_empty());
        // Two writes in one reconcile (finalizer, then status): both echo.
        e.wrote("k", Some("20"));
        e.wrote("k", Some("21"));
        assert!(e.came_back("k", Some("20")));
        assert!(e.came_back("k", Some("21")));
        assert!(e.is_empty());
    }

    #[test]
    fn a_version_that_is_not_a_number_is_never_an_echo() {
        let e = Echoes::default();
        e.wrote("k", Some("abc"));
        assert!(!e.came_back("k", Some("abc")));
        assert!(e.is_empty());
    }
}
