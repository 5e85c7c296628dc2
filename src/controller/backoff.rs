//! The per-object error backoff: how long a ModelService waits before its
//! next reconcile after failures in a row.
//!
//! The count is per object and in a row: a success starts it again, and it
//! goes with the object. Before, nothing reset it, so after about a dozen
//! transient errors in an object's life (conflicts, 429s during an apiserver
//! restart) every later error waited the full 5 minutes, and the table grew
//! with every object ever seen.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::context::object_key;

/// Exponential backoff per object: 100 ms, 200 ms, 400 ms ... up to 5
/// minutes for transient errors (a conflict usually clears at once); a
/// permanent one (already reported in status) starts at 30 s.
pub fn delay(failures: u32, permanent: bool) -> Duration {
    let base_ms: u64 = if permanent { 30_000 } else { 100 };
    let ms = base_ms.saturating_mul(1u64 << failures.saturating_sub(1).min(20));
    Duration::from_millis(ms.min(300_000))
}

/// Failures in a row, by `namespace/name`, and the cause last announced
/// for them.
#[derive(Debug, Default)]
pub struct Failures {
    map: Mutex<HashMap<String, InARow>>,
}

#[derive(Debug, Default)]
struct InARow {
    count: u32,
    announced: Option<String>,
}

impl Failures {
    /// One more failure; returns how many in a row.
    pub fn failed(&self, namespace: &str, name: &str) -> u32 {
        match self.map.lock() {
            Ok(mut m) => {
                let e = m.entry(object_key(namespace, name)).or_default();
                e.count = e.count.saturating_add(1);
                e.count
            }
            Err(_) => 1,
        }
    }

    /// How many reconciles of this object failed in a row before this one.
    pub fn in_a_row(&self, namespace: &str, name: &str) -> u32 {
        self.map
            .lock()
            .ok()
            .and_then(|m| m.get(&object_key(namespace, name)).map(|e| e.count))
            .unwrap_or(0)
    }

    /// Whether a failure of `cause` is news for this run of failures: true
    /// the first time, false while the same cause repeats. So a transient
    /// error retried ten times is one `ReconcileFailed` Event, not ten; a
    /// success ends the run, and the same cause later is news again.
    pub fn is_news(&self, namespace: &str, name: &str, cause: &str) -> bool {
        match self.map.lock() {
            Ok(mut m) => {
                let e = m.entry(object_key(namespace, name)).or_default();
                if e.announced.as_deref() == Some(cause) {
                    return false;
                }
                e.announced = Some(cause.to_string());
                true
            }
            Err(_) => true,
        }
    }

    /// A success (or the object is gone): the next failure starts again.
    pub fn forget(&self, namespace: &str, name: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(&object_key(namespace, name));
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
    fn delay_grows_and_is_capped() {
        assert_eq!(delay(1, false), Duration::from_millis(100));
        assert_eq!(delay(2, false), Duration::from_millis(200));
        assert_eq!(delay(4, false), Duration::from_millis(800));
        assert_eq!(delay(40, false), Duration::from_secs(300));
        assert_eq!(delay(1, true), Duration::from_secs(30));
        assert_eq!(delay(10, true), Duration::from_secs(300));
    }

    #[test]
    fn a_success_starts_the_backoff_again() {
        let f = Failures::default();
        let twelfth = (0..12).map(|_| f.failed("ns", "m")).last().unwrap_or(0);
        assert_eq!(delay(twelfth, false), Duration::from_millis(204_800));
        f.forget("ns", "m");
        assert_eq!(
            delay(f.failed("ns", "m"), false),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn a_cause_repeated_is_announced_once_per_run_of_failures() {
        let f = Failures::default();
        assert!(f.is_news("ns", "m", "applying Deployment: conflict"));
        f.failed("ns", "m");
        assert!(!f.is_news("ns", "m", "applying Deployment: conflict"));
        assert!(f.is_news("ns", "m", "applying Service: forbidden"));
        assert!(f.is_news("ns", "other", "applying Deployment: conflict"));
        f.forget("ns", "m");
        assert!(
            f.is_news("ns", "m", "applying Service: forbidden"),
            "after a success, news again"
        );
    }

    #[test]
    fn counts_are_per_object_and_go_with_it() {
        let f = Failures::default();
        f.failed("ns", "a");
        f.failed("ns", "a");
        assert_eq!(f.failed("ns", "b"), 1);
        f.forget("ns", "a");
        f.forget("ns", "b");
        assert!(f.is_empty());
    }
}
