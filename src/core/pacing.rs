//! When a new status is written: news at once, progress at a pace.
//!
//! While a Deployment rolls out, its controller updates its status several
//! times (observed, pods created, each pod available), and each update
//! changes a count in our status message: "1/3 pods updated, 0 available".
//! Writing each of those cost a status patch per step on a real API server
//! (0.5 to 0.7 extra patches per ModelService in a cold start of 100) and
//! tells a reader nothing they need at once. So a status whose difference is
//! only progress (messages and pod counts) is written at most once per pace
//! per object; news (a condition's status or reason, the observed
//! generation, the URL, weights, the autoscaler or route state) is written
//! at once. The last step of a rollout is always news (Ready turns True, or
//! the reason names a problem), so the final status is never late.

use std::time::Duration;

use crate::api::ModelServiceStatus;

/// What to do with a computed status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Write it now.
    Now,
    /// It is only progress and the last write was recent: look again after
    /// this long (the reconcile requeues; a newer change may replace it).
    After(Duration),
}

/// `new` against the status the object carries (`current`), with the time
/// since our last status write of this object (`None`: not since start).
/// Call only when the two differ.
pub fn when(
    current: Option<&ModelServiceStatus>,
    new: &ModelServiceStatus,
    since_last_write: Option<Duration>,
    pace: Duration,
) -> Write {
    let Some(current) = current else {
        return Write::Now;
    };
    if is_news(current, new) {
        return Write::Now;
    }
    match since_last_write {
        Some(since) if since < pace => Write::After(pace - since),
        _ => Write::Now,
    }
}

/// True when `new` differs from `old` in more than progress: anything but
/// condition messages and pod counts.
pub fn is_news(old: &ModelServiceStatus, new: &ModelServiceStatus) -> bool {
    skeleton(old) != skeleton(new)
}

/// The status without what only reports progress.
fn skeleton(s: &ModelServiceStatus) -> ModelServiceStatus {
    let mut s = s.clone();
    s.replicas = None;
    s.ready_replicas = None;
    for c in &mut s.conditions {
        c.message.clear();
    }
    if let Some(t) = s.tracks.as_mut() {
        for track in [&mut t.stable, &mut t.canary] {
            track.replicas = 0;
            track.ready_replicas = 0;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{TrackStatus, TracksStatus};
    use serde_json::json;

    const PACE: Duration = Duration::from_secs(2);

    fn status(ready: &str, reason: &str, message: &str, replicas: i32) -> ModelServiceStatus {
        serde_json::from_value(json!({
            "observedGeneration": 1, "replicas": replicas, "readyReplicas": 0,
            "url": "http://m.ns.svc:8000",
            "conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": message,
                "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }))
        .unwrap_or_default()
    }

    #[test]
    fn progress_waits_for_the_pace_news_does_not() {
        let rolling = status("False", "RollingOut", "0/1 pods updated", 0);
        let counted = status("False", "RollingOut", "1/1 pods updated", 1);
        let ready = status("True", "Available", "1/1 replicas ready", 1);
        let short = status("False", "InsufficientGPU", "no node has 1 free GPU", 1);
        let recent = Some(Duration::from_millis(500));
        assert_eq!(
            when(Some(&rolling), &counted, recent, PACE),
            Write::After(Duration::from_millis(1500))
        );
        assert_eq!(when(Some(&rolling), &ready, recent, PACE), Write::Now);
        assert_eq!(when(Some(&rolling), &short, recent, PACE), Write::Now);
        // Progress is written once the pace has passed, or when we have not
        // written since start (the last write's time is unknown).
        assert_eq!(when(Some(&rolling), &counted, Some(PACE), PACE), Write::Now);
        assert_eq!(when(Some(&rolling), &counted, None, PACE), Write::Now);
        // The first status of an object is news.
        assert_eq!(when(None, &rolling, recent, PACE), Write::Now);
    }

    #[test]
    fn a_new_generation_weights_and_the_url_are_news() {
        let a = status("False", "RollingOut", "x", 0);
        let mut b = a.clone();
        b.observed_generation = Some(2);
        assert!(is_news(&a, &b));
        let mut c = a.clone();
        c.url = None;
        assert!(is_news(&a, &c));
        let tracks = |weight: i32, ready: i32| TracksStatus {
            stable: TrackStatus {
                replicas: 2,
                ready_replicas: ready,
                weight: Some(100 - weight),
            },
            canary: TrackStatus {
                replicas: 1,
                ready_replicas: 0,
                weight: Some(weight),
            },
        };
        let mut d = a.clone();
        d.tracks = Some(tracks(0, 1));
        let mut e = a.clone();
        e.tracks = Some(tracks(10, 1));
        let mut f = a.clone();
        f.tracks = Some(tracks(0, 2));
        assert!(is_news(&d, &e), "a weight is news");
        assert!(!is_news(&d, &f), "a pod count is progress");
    }
}
