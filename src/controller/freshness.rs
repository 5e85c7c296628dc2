//! How far a watch cache has caught up, so that a remembered write (see
//! `recent`) stands in for the cache only while the cache is really behind.
//!
//! An object missing from the cache is either not yet seen or deleted. Our
//! memo of a write used to take "missing" as "not yet seen", so a child that
//! someone deleted before the cache showed our write was taken as present
//! forever, and never recreated. kube-controller-manager's "expectations"
//! answer this by watching for the event that settles a write. Here that
//! event is any event of the same watch at or after the write's
//! resourceVersion: the watch delivers events in resourceVersion order, so
//! once it has delivered one at R the cache holds every change up to R,
//! our write and any deletion after it included. A relist that began after
//! the write settles it too, which covers a deletion hidden in a relist
//! (after a 410) when nothing newer happens to come.
//!
//! resourceVersions are compared as numbers, as `recent` does; one that is
//! not a number is never recorded there, so nothing depends on this.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use kube::Resource;
use kube::runtime::watcher::Event;

/// The progress of one watch cache.
#[derive(Debug, Default)]
pub struct Freshness {
    /// The newest resourceVersion the watch delivered.
    newest: AtomicU64,
    relists: Mutex<Relists>,
}

#[derive(Debug, Default)]
struct Relists {
    /// When the relist in progress began.
    started: Option<Instant>,
    /// When the last completed relist began: the cache holds every change
    /// made before then.
    complete_from: Option<Instant>,
}

impl Freshness {
    /// Notes what `event` tells about the cache, after the reflector applied it.
    pub fn observe<K: Resource>(&self, event: &Event<K>) {
        match event {
            Event::Apply(o) | Event::Delete(o) | Event::InitApply(o) => {
                if let Some(rv) = o.meta().resource_version.as_deref().and_then(parse) {
                    self.newest.fetch_max(rv, Ordering::AcqRel);
                }
            }
            Event::Init => self.with_relists(|r| r.started = Some(Instant::now())),
            Event::InitDone => self.with_relists(|r| {
                if let Some(started) = r.started.take() {
                    r.complete_from = Some(started);
                }
            }),
        }
    }

    /// Whether the cache already reflects a write that produced
    /// `resource_version` at `written_at`.
    pub fn covers(&self, resource_version: u64, written_at: Instant) -> bool {
        self.newest.load(Ordering::Acquire) >= resource_version
            || self
                .relists
                .lock()
                .is_ok_and(|r| r.complete_from.is_some_and(|from| from > written_at))
    }

    fn with_relists(&self, f: impl FnOnce(&mut Relists)) {
        if let Ok(mut r) = self.relists.lock() {
            f(&mut r);
        }
    }
}

/// A resourceVersion as a number, where it is one.
pub fn parse(rv: &str) -> Option<u64> {
    rv.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn at(rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.resource_version = Some(rv.into());
        c
    }

    #[test]
    fn an_event_at_or_after_the_write_covers_it_a_deletion_included() {
        let f = Freshness::default();
        let written = Instant::now();
        assert!(!f.covers(10, written));
        f.observe(&Event::Apply(at("9")));
        assert!(!f.covers(10, written), "the cache is behind our write");
        f.observe(&Event::Delete(at("12")));
        assert!(f.covers(10, written), "a later deletion settles the write");
        f.observe(&Event::Apply(at("11")));
        assert!(f.covers(10, written), "the newest version never goes back");
    }

    #[test]
    fn a_relist_that_began_after_the_write_covers_it() {
        let f = Freshness::default();
        let written = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        f.observe(&Event::<ConfigMap>::Init);
        f.observe(&Event::InitApply(at("3")));
        assert!(!f.covers(10, written), "not until the relist is done");
        f.observe(&Event::<ConfigMap>::InitDone);
        assert!(f.covers(10, written));
        assert!(
            !f.covers(10, Instant::now()),
            "a write after the relist began is not covered by it"
        );
    }

    #[test]
    fn opaque_resource_versions_move_nothing() {
        let f = Freshness::default();
        f.observe(&Event::Apply(at("abc")));
        assert!(!f.covers(1, Instant::now()));
    }
}
