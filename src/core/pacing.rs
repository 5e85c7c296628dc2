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
//!
//! A new generation may likewise wait for its verdict (`Pace::first_report`):
//! Ready, a named problem (Degraded), or a rollout that ended (Progressing
//! False). What the operator can say in the first moments ("the Deployment
//! controller has not looked yet") is stale soon after, and costs one more
//! patch per ModelService; but waiting also delays `observedGeneration`,
//! which GitOps tools wait on. The wait is 0 by default (BENCHMARKS.md
//! measures both). Meanwhile the object's status still carries the previous
//! `observedGeneration`, so no reader mistakes the old verdict for the new
//! spec's.

use std::time::Duration;

use crate::api::{ModelServiceStatus, condition_types as ct};
use crate::core::conditions::find;

/// What to do with a computed status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Write it now.
    Now,
    /// It is only progress and the last write was recent: look again after
    /// this long (the reconcile requeues; a newer change may replace it).
    After(Duration),
}

/// How long ago things happened to one object, as the operator saw them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Since our last status write (`None`: none since start).
    pub since_last_write: Option<Duration>,
    /// Since a reconcile first computed a status for the generation `new`
    /// describes.
    pub since_generation_seen: Duration,
}

/// How fast statuses are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// The least time between two writes that differ only in progress.
    pub progress: Duration,
    /// How long a new generation's first report waits for its verdict.
    pub first_report: Duration,
}

/// `new` against the status the object carries (`current`). Call only when
/// the two differ.
pub fn when(
    current: Option<&ModelServiceStatus>,
    new: &ModelServiceStatus,
    timing: Timing,
    pace: Pace,
) -> Write {
    let new_generation = current.and_then(|c| c.observed_generation) != new.observed_generation;
    if new_generation && !is_verdict(new) && timing.since_generation_seen < pace.first_report {
        return Write::After(pace.first_report - timing.since_generation_seen);
    }
    let pace = pace.progress;
    let Some(current) = current else {
        return Write::Now;
    };
    if is_news(current, new) {
        return Write::Now;
    }
    match timing.since_last_write {
        Some(since) if since < pace => Write::After(pace - since),
        _ => Write::Now,
    }
}

/// True when `new` says how the rollout ended or what stops it: Ready,
/// Degraded, or Progressing False.
pub fn is_verdict(new: &ModelServiceStatus) -> bool {
    let is = |t: &str, v: &str| find(&new.conditions, t).is_some_and(|c| c.status == v);
    is(ct::READY, "True") || is(ct::DEGRADED, "True") || is(ct::PROGRESSING, "False")
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

    const PACE: Pace = Pace {
        progress: Duration::from_secs(2),
        first_report: Duration::from_secs(2),
    };

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
        let t = |last: Option<u64>| Timing {
            since_last_write: last.map(Duration::from_millis),
            since_generation_seen: Duration::from_secs(60),
        };
        assert_eq!(
            when(Some(&rolling), &counted, t(Some(500)), PACE),
            Write::After(Duration::from_millis(1500))
        );
        assert_eq!(when(Some(&rolling), &ready, t(Some(500)), PACE), Write::Now);
        assert_eq!(when(Some(&rolling), &short, t(Some(500)), PACE), Write::Now);
        // Progress is written once the pace has passed, or when we have not
        // written since start (the last write's time is unknown).
        assert_eq!(
            when(Some(&rolling), &counted, t(Some(2000)), PACE),
            Write::Now
        );
        assert_eq!(when(Some(&rolling), &counted, t(None), PACE), Write::Now);
    }

    #[test]
    fn a_new_generation_is_first_reported_with_its_verdict_or_after_the_pace() {
        let rolling = status(
            "False",
            "RollingOut",
            "waiting for the Deployment controller",
            0,
        );
        let ready = status("True", "Available", "1/1 replicas ready", 1);
        let mut short = status("False", "InsufficientGPU", "no node has 1 free GPU", 1);
        let degraded = serde_json::from_value(json!({"type": "Degraded", "status": "True",
            "reason": "InsufficientGPU", "message": "no node", "lastTransitionTime": "2026-01-01T00:00:00Z"}));
        short.conditions.extend(degraded.ok());
        let fresh = Timing {
            since_last_write: None,
            since_generation_seen: Duration::from_millis(300),
        };
        // A new object: its first moments wait, its verdict does not.
        assert_eq!(
            when(None, &rolling, fresh, PACE),
            Write::After(Duration::from_millis(1700))
        );
        assert_eq!(when(None, &ready, fresh, PACE), Write::Now);
        assert_eq!(when(None, &short, fresh, PACE), Write::Now);
        let later = Timing {
            since_generation_seen: PACE.first_report,
            ..fresh
        };
        assert_eq!(when(None, &rolling, later, PACE), Write::Now);
        // A spec change: the same for generation 2.
        let mut rolling2 = rolling.clone();
        rolling2.observed_generation = Some(2);
        assert_eq!(
            when(Some(&ready), &rolling2, fresh, PACE),
            Write::After(Duration::from_millis(1700))
        );
        assert!(is_verdict(&ready) && is_verdict(&short) && !is_verdict(&rolling));
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
