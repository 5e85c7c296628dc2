//! A canary that waits for GPUs: reported, never rolled back as failed, and
//! never holding the stable track's GPUs hostage.
//!
//! A canary adds pods beside the stable track's, and on a cluster whose
//! GPUs are full they wait. That is the cluster's state, not the new
//! version's failure, so it is no cause for a rollback (see `rollback`);
//! the canary gets no weight until a pod of it is ready (see
//! `tracks::weights`). But a waiting canary pod competes with the stable
//! track for every GPU that frees up: when the stable track rolls out by
//! replacing, the GPU its old pod frees may go to the canary pod that has
//! waited longer, and the stable track is left without it. So while the
//! stable track rolls out, a canary that has waited past the grace period
//! is held at the pods the scheduler did place (its waiting pods go: a
//! ReplicaSet scales down unscheduled pods first), and it does not grow
//! until the stable rollout is complete.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::conditions::Wanted;
use super::diagnosis::{GpuRequest, Problem, diagnose, waiting_for};
use super::reasons;
use crate::api::condition_types as ct;

/// The annotation on the canary Deployment while it is held: the replicas
/// it is held at. It is what keeps it held once its waiting pods are gone,
/// and it tells a hold from a rollback or a spec that asks for fewer.
pub const ANNOTATION: &str = "serving.modelservice.dev/held-for-stable";

/// The canary's pods, while some wait for GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanaryWaiting {
    /// What diagnosis says (`InsufficientGPU`, quoting the scheduler).
    pub problem: Problem,
    /// Canary pods the scheduler placed.
    pub placed: i32,
    /// A pod has waited longer than the grace period.
    pub past_grace: bool,
}

/// Whether the canary's `pods` wait for GPUs, at `now`.
pub fn waiting(
    pods: &[Pod],
    gpu: GpuRequest<'_>,
    now: Timestamp,
    grace: Duration,
) -> Option<CanaryWaiting> {
    let problem = diagnose(pods, gpu).filter(|p| p.reason == reasons::INSUFFICIENT_GPU)?;
    let live = || {
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
    };
    let placed = live()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "PodScheduled" && c.status == "True")
                })
        })
        .count();
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let past_grace = live().any(|p| {
        waiting_for(p, gpu.resource).is_some_and(|c| {
            let since = c
                .last_transition_time
                .as_ref()
                .or(p.metadata.creation_timestamp.as_ref())
                .map_or(now, |t| t.0);
            now.as_millisecond() - since.as_millisecond() >= grace_ms
        })
    });
    Some(CanaryWaiting {
        problem,
        placed: i32::try_from(placed).unwrap_or(i32::MAX),
        past_grace,
    })
}

/// The canary's replicas while the stable track rolls out (`stable_rolls`),
/// when they differ from the `wanted` ones: its placed pods once it has
/// waited past the grace period, and, once held (`before`, the
/// annotation's count), no more until the stable rollout is done. `None`
/// otherwise.
pub fn held(
    waiting: Option<&CanaryWaiting>,
    stable_rolls: bool,
    wanted: i32,
    before: Option<i32>,
) -> Option<i32> {
    if !stable_rolls {
        return None;
    }
    if let Some(w) = waiting.filter(|w| w.past_grace) {
        return Some(w.placed.min(wanted));
    }
    before.filter(|n| *n < wanted)
}

/// Holds the canary Deployment `d` at `n` replicas, and says so on it.
pub fn hold(d: &mut k8s_openapi::api::apps::v1::Deployment, n: i32) {
    d.spec.replicas = Some(n);
    d.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION.into(), n.to_string());
}

/// The count a cached canary is held at, from its annotation; anything
/// unreadable is no hold.
pub fn held_before(annotation: Option<&str>) -> Option<i32> {
    annotation?.trim().parse().ok().filter(|n: &i32| *n >= 0)
}

/// CanaryHealthy while the canary waits for GPUs (or is held for the
/// stable track): False, so that nobody mistakes it for a healthy
/// canary, with a reason that is not a rollback's.
pub fn condition(
    waiting: Option<&CanaryWaiting>,
    held: Option<i32>,
    ready: i32,
    wanted: i32,
) -> Option<Wanted> {
    if waiting.is_none() && held.is_none() {
        return None;
    }
    let cause = waiting.map_or_else(
        || "its pods wait for GPUs".to_string(),
        |w| w.problem.message.clone(),
    );
    let hold = held
        .map(|n| {
            format!(
                "; held at {n} of {wanted} replicas while the stable track rolls out, so that its waiting pods do not take the GPUs the stable pods free"
            )
        })
        .unwrap_or_default();
    Some(Wanted::new(
        ct::CANARY_HEALTHY,
        false,
        reasons::INSUFFICIENT_GPU,
        format!(
            "{ready}/{wanted} canary pods ready; the canary waits for GPUs: {cause}{hold}. It gets traffic once a pod is ready, and it is not rolled back: GPUs are short, the new version has not failed"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GPU: GpuRequest<'static> = GpuRequest {
        gpus: 1,
        resource: "nvidia.com/gpu",
    };
    const GRACE: Duration = Duration::from_secs(10);

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn pending(name: &str, since: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": since,
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}}))
        .expect("pod")
    }

    fn placed(name: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}}))
        .expect("pod")
    }

    #[test]
    fn a_wait_for_gpus_is_counted_with_the_pods_that_were_placed() {
        let pods = [
            placed("c-1"),
            pending("c-2", "2026-12-05T08:00:00Z"),
            pending("c-3", "2026-12-05T08:00:08Z"),
        ];
        let w = waiting(&pods, GPU, at("2026-12-05T08:00:09Z"), GRACE).expect("waiting");
        assert_eq!((w.placed, w.past_grace), (1, false));
        assert_eq!(w.problem.reason, reasons::INSUFFICIENT_GPU);
        let w = waiting(&pods, GPU, at("2026-12-05T08:00:10Z"), GRACE).expect("waiting");
        assert!(w.past_grace);
        assert_eq!(
            waiting(&[placed("c-1")], GPU, at("2026-12-05T08:00:10Z"), GRACE),
            None
        );
    }

    #[test]
    fn the_canary_is_held_only_while_the_stable_track_rolls_out() {
        let w = CanaryWaiting {
            problem: Problem {
                reason: reasons::INSUFFICIENT_GPU,
                message: "no node has 1 free nvidia.com/gpu".into(),
            },
            placed: 1,
            past_grace: true,
        };
        assert_eq!(held(Some(&w), true, 3, Some(3)), Some(1));
        assert_eq!(held(Some(&w), false, 3, Some(3)), None);
        let early = CanaryWaiting {
            past_grace: false,
            ..w.clone()
        };
        assert_eq!(held(Some(&early), true, 3, Some(3)), None);
        // Held before: it stays held, its waiting pods gone, until the
        // stable rollout is done; it never grows meanwhile.
        assert_eq!(held(None, true, 3, Some(1)), Some(1));
        assert_eq!(held(None, false, 3, Some(1)), None);
        assert_eq!(held(None, true, 3, Some(3)), None);
        assert_eq!(held(None, true, 2, Some(3)), None, "shrinking is not held");
        // A canary at 0 for another reason (rolled back, then a new
        // template) carries no hold, and grows.
        assert_eq!(held(None, true, 1, held_before(None)), None);
        assert_eq!(held_before(Some("2")), Some(2));
        assert_eq!(held_before(Some("-1")), None);
        assert_eq!(held_before(Some("x")), None);
        let mut d = k8s_openapi::api::apps::v1::Deployment::default();
        hold(&mut d, 0);
        assert_eq!(d.spec.replicas, Some(0));
        assert_eq!(
            held_before(
                d.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION))
                    .map(String::as_str)
            ),
            Some(0)
        );
    }

    #[test]
    fn the_condition_says_it_waits_and_is_not_rolled_back() {
        let w = CanaryWaiting {
            problem: Problem {
                reason: reasons::INSUFFICIENT_GPU,
                message: "no node has 1 free nvidia.com/gpu for a replica".into(),
            },
            placed: 0,
            past_grace: true,
        };
        let c = condition(Some(&w), Some(0), 0, 1).expect("a condition");
        assert!(!c.status);
        assert_eq!(c.reason, reasons::INSUFFICIENT_GPU);
        assert!(
            c.message.starts_with(
                "0/1 canary pods ready; the canary waits for GPUs: no node has 1 free"
            ),
            "{}",
            c.message
        );
        assert!(
            c.message
                .contains("held at 0 of 1 replicas while the stable track rolls out"),
            "{}",
            c.message
        );
        assert!(c.message.contains("it is not rolled back"), "{}", c.message);
        assert!(condition(None, None, 1, 1).is_none());
    }
}
