//! A LeaderWorkerSet's replicas are groups: what is ready, and who is who.
//!
//! The rest of the status (Ready, Progressing, the replica counts) is
//! judged from a Deployment's rollout; [`as_rollout`] states the groups in
//! those terms, counted in groups, so one set of rules judges both. A group
//! counts as ready only when the LWS says so *and* its pods show every
//! member ready: an operator that trusted one source alone reported
//! multi-node models wrong (KServe never saw them Ready at all).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};
use k8s_openapi::api::core::v1::Pod;

use super::diagnosis::Problem;
use super::reasons;
use crate::api::lws::LeaderWorkerSetStatus;
use crate::api::lws::labels::{GROUP_INDEX, WORKER_INDEX};

/// Where `pod` sits in its group: (group, worker), from the labels LWS
/// gives every pod. `None` for a pod that is not a group's.
pub fn member(pod: &Pod) -> Option<(i32, i32)> {
    let labels = pod.metadata.labels.as_ref()?;
    let index = |k: &str| labels.get(k)?.parse::<i32>().ok().filter(|i| *i >= 0);
    Some((index(GROUP_INDEX)?, index(WORKER_INDEX)?))
}

/// How status names a member: "the leader of group 0", "worker 2 of group 0".
pub fn describe((group, worker): (i32, i32)) -> String {
    if worker == 0 {
        format!("the leader of group {group}")
    } else {
        format!("worker {worker} of group {group}")
    }
}

/// Whether every container of `pod` is ready (a pod with no status yet is not).
fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.ready))
}

/// Groups among `pods` whose `size` members are all there and ready.
pub fn ready_groups(pods: &[Pod], size: i32) -> i32 {
    let mut members: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for pod in pods.iter().filter(|p| pod_ready(p)) {
        if let Some((g, w)) = member(pod).filter(|(_, w)| *w < size) {
            members.entry(g).or_default().push(w);
        }
    }
    let full = members.into_values().filter(|ws| {
        let mut ws = ws.clone();
        ws.sort_unstable();
        ws.dedup();
        ws.len() == usize::try_from(size).unwrap_or(0)
    });
    i32::try_from(full.count()).unwrap_or(i32::MAX)
}

/// The LWS's state as a Deployment's rollout, counted in groups: `desired`
/// groups of `size` pods, as the LWS controller reported them (`status`)
/// and as the pods are.
pub fn as_rollout(
    status: Option<&LeaderWorkerSetStatus>,
    desired: i32,
    size: i32,
    pods: &[Pod],
) -> Option<DeploymentStatus> {
    let s = status?;
    let ready = s.ready_replicas.unwrap_or(0).min(ready_groups(pods, size));
    let updated = s.updated_replicas.unwrap_or(0);
    let done = updated >= desired;
    Some(DeploymentStatus {
        observed_generation: s.observed_generation,
        replicas: s.replicas,
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(ready),
        conditions: Some(vec![DeploymentCondition {
            type_: Some("Progressing".into()),
            status: Some("True".into()),
            // The reason a finished Deployment rollout carries: after it, a
            // change of count is scaling, not rolling out.
            reason: Some(
                if done {
                    "NewReplicaSetAvailable"
                } else {
                    "ReplicaSetUpdated"
                }
                .into(),
            ),
            ..DeploymentCondition::default()
        }]),
        ..DeploymentStatus::default()
    })
}

/// The leader of each group among `pods`, by its uid: a group that LWS
/// recreates (`RecreateGroupOnPodRestart`) gets a new leader.
pub fn leaders(pods: &[Pod]) -> BTreeMap<i32, String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| match member(p)? {
            (g, 0) => Some((g, p.metadata.uid.clone()?)),
            _ => None,
        })
        .collect()
}

/// How long recreations of a group are counted.
pub const RECREATION_WINDOW_MINUTES: u64 = 10;
/// Recreations within the window that make a loop: a group that starts
/// over once may have lost a node; twice is a member that keeps failing.
pub const RECREATIONS_SAID: usize = 2;

/// The problem of the group recreated most often in the window, once that
/// is [`RECREATIONS_SAID`] times or more: its restarts start over with each
/// new pod, so a crash loop or a member that never finishes loading would
/// otherwise never show.
pub fn recreating(recreations: &BTreeMap<i32, usize>) -> Option<Problem> {
    let (group, times) = recreations
        .iter()
        .filter(|(_, n)| **n >= RECREATIONS_SAID)
        .max_by_key(|(g, n)| (**n, -**g))?;
    Some(Problem {
        reason: reasons::GROUP_RECREATING,
        message: format!(
            "group {group} was recreated {times} times in the last {RECREATION_WINDOW_MINUTES} minutes: one of its pods keeps failing, and a group starts over as a whole when a member restarts (RecreateGroupOnPodRestart); see `kubectl logs --previous` and the events of its pods"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rollout::{DeploymentState, Rollout, rollout};
    use serde_json::json;

    pub fn group_pod(group: i32, worker: i32, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("m-{group}-{worker}"), "labels": {
                GROUP_INDEX: group.to_string(), WORKER_INDEX: worker.to_string()}},
            "status": {"containerStatuses": [{"name": "server", "image": "i", "imageID": "",
                "ready": ready, "restartCount": 0}]}
        }))
        .expect("pod")
    }

    fn lws(replicas: i32, ready: i32, updated: i32) -> LeaderWorkerSetStatus {
        LeaderWorkerSetStatus {
            observed_generation: Some(1),
            replicas: Some(replicas),
            ready_replicas: Some(ready),
            updated_replicas: Some(updated),
            ..LeaderWorkerSetStatus::default()
        }
    }

    fn judged(s: &LeaderWorkerSetStatus, desired: i32, pods: &[Pod]) -> Rollout {
        let st = as_rollout(Some(s), desired, 2, pods);
        rollout(Some(DeploymentState {
            generation: 1,
            replicas: Some(desired),
            status: st.as_ref(),
        }))
    }

    #[test]
    fn a_group_is_ready_only_when_every_member_is() {
        let pods = [
            group_pod(0, 0, true),
            group_pod(0, 1, true),
            group_pod(1, 0, true),
            group_pod(1, 1, false),
        ];
        assert_eq!(ready_groups(&pods, 2), 1);
        assert_eq!(ready_groups(&pods[..3], 2), 1, "a missing worker");
        assert_eq!(ready_groups(&pods[..2], 3), 0, "a group of three");
    }

    #[test]
    fn the_lws_and_the_pods_must_both_say_ready() {
        let all = [
            group_pod(0, 0, true),
            group_pod(0, 1, true),
            group_pod(1, 0, true),
            group_pod(1, 1, true),
        ];
        assert_eq!(
            judged(&lws(2, 2, 2), 2, &all),
            Rollout::Complete {
                available: 2,
                desired: 2
            }
        );
        // The LWS has not seen it yet.
        assert_eq!(
            judged(&lws(2, 1, 2), 2, &all),
            Rollout::Scaling {
                available: 1,
                desired: 2
            }
        );
        // The LWS said ready, but a worker is not (any more).
        let one_down = [&all[..3], &[group_pod(1, 1, false)]].concat();
        assert_eq!(
            judged(&lws(2, 2, 2), 2, &one_down),
            Rollout::Scaling {
                available: 1,
                desired: 2
            }
        );
        assert!(matches!(
            judged(&lws(2, 1, 1), 2, &all),
            Rollout::RollingOut { updated: 1, .. }
        ));
        assert_eq!(as_rollout(None, 2, 2, &all), None);
    }

    #[test]
    fn members_are_named_by_their_place_in_the_group() {
        assert_eq!(member(&group_pod(3, 2, true)), Some((3, 2)));
        assert_eq!(describe((0, 0)), "the leader of group 0");
        assert_eq!(describe((0, 2)), "worker 2 of group 0");
        let mut p = group_pod(0, 1, true);
        p.metadata.labels = None;
        assert_eq!(member(&p), None);
    }

    #[test]
    fn a_group_recreated_twice_is_a_problem_and_once_is_not() {
        assert_eq!(recreating(&BTreeMap::from([(0, 1), (1, 0)])), None);
        let p = recreating(&BTreeMap::from([(0, 1), (1, 3), (2, 3)])).expect("a loop");
        assert_eq!(p.reason, reasons::GROUP_RECREATING);
        assert!(
            p.message.starts_with("group 1 was recreated 3 times"),
            "{}",
            p.message
        );
    }

    #[test]
    fn leaders_are_found_by_group() {
        let mut l = group_pod(0, 0, true);
        l.metadata.uid = Some("u0".into());
        let mut w = group_pod(0, 1, true);
        w.metadata.uid = Some("u1".into());
        assert_eq!(leaders(&[l, w]), BTreeMap::from([(0, "u0".to_string())]));
    }
}
