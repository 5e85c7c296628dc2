//! The closed loop over a surge decision: the scheduler's verdict on our own
//! pods refutes it.
//!
//! A decision to surge is a prediction (see `surge`), made from a read of
//! nodes and pods that may be stale by the time the surge pod exists:
//! another workload took the GPU meanwhile, or several rollouts shared one
//! read. With maxUnavailable 0, a surge pod that fits nowhere waits for a
//! GPU that may never come while every old pod keeps its own: the rollout
//! stalls. So once one of the model's pods has waited for lack of the GPU
//! resource for longer than a grace period, the same pod template switches
//! to replace, which frees GPUs by taking an old pod down first. The grace
//! period lets a GPU that is being freed reach the pod (the scheduler tries
//! an unschedulable pod again within 10 s of a change in the cluster) before
//! a replica's availability is given up.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::diagnosis::{one_line, waiting_for};
use super::surge::Decision;

/// The scheduler's message is quoted up to this many characters: a cluster
/// of many node pools makes it long, and it is one line of a condition.
const QUOTED: usize = 300;

/// What the scheduler says of a decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No pod waits for the resource (or the decision was to replace).
    Holds,
    /// A pod has waited since `since`, not yet for the grace period: judge
    /// again after `recheck`.
    Waiting { since: Timestamp, recheck: Duration },
    /// A pod has waited since `since`, longer than the grace period: the
    /// template replaces from now on.
    Refuted {
        since: Timestamp,
        decision: Decision,
    },
}

/// Judges `decision` against `pods` (the model's pods of every template
/// but the canary's), at `now`.
pub fn judge(
    decision: &Decision,
    pods: &[Pod],
    resource: &str,
    now: Timestamp,
    grace: Duration,
) -> Verdict {
    if !decision.surge {
        return Verdict::Holds;
    }
    // The longest wait speaks; name order breaks ties, so the message does
    // not depend on list order.
    let longest = pods
        .iter()
        .filter_map(|p| {
            let cond = waiting_for(p, resource)?;
            let since = cond
                .last_transition_time
                .as_ref()
                .or(p.metadata.creation_timestamp.as_ref())
                .map_or(now, |t| t.0);
            Some((since, p.metadata.name.as_deref().unwrap_or_default(), cond))
        })
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
    let Some((since, pod, cond)) = longest else {
        return Verdict::Holds;
    };
    let waited = Duration::from_millis(
        u64::try_from(now.as_millisecond() - since.as_millisecond()).unwrap_or(0),
    );
    if waited < grace {
        return Verdict::Waiting {
            since,
            recheck: grace - waited,
        };
    }
    let scheduler: String = one_line(cond.message.as_deref().unwrap_or_default())
        .chars()
        .take(QUOTED)
        .collect();
    let decision = Decision::replace(
        &decision.template,
        format!(
            "surge refuted by the scheduler: pod {pod} waited {} s for {resource} ({scheduler:?}); replacing",
            waited.as_secs()
        ),
    );
    Verdict::Refuted { since, decision }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GPU: &str = "nvidia.com/gpu";
    const GRACE: Duration = Duration::from_secs(10);

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn pending(name: &str, since: &str, message: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": "2026-12-05T08:00:00Z"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": since, "message": message}]}}))
        .expect("pod")
    }

    fn running(name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}}))
        .expect("pod")
    }

    const SHORT: &str = "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.";

    fn surge() -> Decision {
        Decision::surge(
            "t1",
            1,
            "surging: node gpu-2 has 2 free nvidia.com/gpu".into(),
        )
    }

    #[test]
    fn a_surge_pod_that_waits_for_gpus_past_the_grace_period_refutes_the_surge() {
        let pods = [
            running("m-old"),
            pending("m-new", "2026-12-05T08:00:01Z", SHORT),
        ];
        assert_eq!(
            judge(&surge(), &pods, GPU, at("2026-12-05T08:00:04Z"), GRACE),
            Verdict::Waiting {
                since: at("2026-12-05T08:00:01Z"),
                recheck: Duration::from_secs(7)
            }
        );
        let Verdict::Refuted { since, decision } =
            judge(&surge(), &pods, GPU, at("2026-12-05T08:00:11Z"), GRACE)
        else {
            panic!("refuted at the end of the grace period");
        };
        assert_eq!(since, at("2026-12-05T08:00:01Z"));
        assert_eq!(decision.template, "t1", "the same template replaces");
        assert!(!decision.surge);
        assert_eq!(decision.pods_surged(), 0);
        assert!(
            decision.message.starts_with(
                "surge refuted by the scheduler: pod m-new waited 10 s for nvidia.com/gpu (\"0/4 nodes are available: 1 Insufficient nvidia.com/gpu,"
            ) && decision.message.ends_with("\"); replacing"),
            "{}",
            decision.message
        );
    }

    #[test]
    fn only_a_wait_for_the_gpu_resource_refutes() {
        let now = at("2026-12-05T09:00:00Z");
        let selector = pending(
            "m-new",
            "2026-12-05T08:00:00Z",
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
        );
        assert_eq!(
            judge(&surge(), &[selector], GPU, now, GRACE),
            Verdict::Holds
        );
        let other_gpu = pending(
            "m-new",
            "2026-12-05T08:00:00Z",
            "0/3 nodes are available: 3 Insufficient amd.com/gpu.",
        );
        assert_eq!(
            judge(&surge(), &[other_gpu], GPU, now, GRACE),
            Verdict::Holds
        );
        let mut deleted = pending("m-new", "2026-12-05T08:00:00Z", SHORT);
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        assert_eq!(judge(&surge(), &[deleted], GPU, now, GRACE), Verdict::Holds);
        assert_eq!(
            judge(&surge(), &[running("m")], GPU, now, GRACE),
            Verdict::Holds
        );
    }

    #[test]
    fn a_replace_is_never_judged() {
        let pods = [pending("m-new", "2026-12-05T08:00:00Z", SHORT)];
        let replace = Decision::replace("t1", "replacing: ...".into());
        assert_eq!(
            judge(&replace, &pods, GPU, at("2026-12-05T09:00:00Z"), GRACE),
            Verdict::Holds
        );
    }

    #[test]
    fn the_longest_wait_speaks_and_a_missing_transition_time_counts_from_creation() {
        let mut no_time = pending("m-a", "2026-12-05T08:00:30Z", SHORT);
        if let Some(c) = no_time.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].last_transition_time = None;
        }
        let pods = [pending("m-b", "2026-12-05T08:00:30Z", SHORT), no_time];
        let Verdict::Refuted { since, decision } =
            judge(&surge(), &pods, GPU, at("2026-12-05T08:00:35Z"), GRACE)
        else {
            panic!("m-a has waited since its creation, 35 s");
        };
        assert_eq!(since, at("2026-12-05T08:00:00Z"));
        assert!(
            decision.message.contains("pod m-a waited 35 s"),
            "{}",
            decision.message
        );
    }

    #[test]
    fn a_clock_behind_the_scheduler_waits_the_whole_grace_period() {
        let pods = [pending("m-new", "2026-12-05T08:00:10Z", SHORT)];
        assert_eq!(
            judge(&surge(), &pods, GPU, at("2026-12-05T08:00:05Z"), GRACE),
            Verdict::Waiting {
                since: at("2026-12-05T08:00:10Z"),
                recheck: GRACE
            }
        );
    }
}
