//! Why pods are not serving, read from their scheduling and container states.
//!
//! This is the part users cannot get from `kubectl get deploy`: the scheduler's
//! "Insufficient nvidia.com/gpu", an image that cannot be pulled, a server that
//! crashes while loading. Only the pods of this ModelService are looked at.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};

use super::reasons;

/// Something about the pods that needs a human.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

/// What the diagnosis needs from the spec, to word its messages.
#[derive(Clone, Copy, Debug)]
pub struct GpuRequest<'a> {
    pub gpus: i32,
    pub resource: &'a str,
}

/// The most pressing problem among `pods`, if any. Order of precedence: image
/// pull failures and crash loops (the pods run but cannot serve), then GPU
/// shortage, then other scheduling failures. Pods are visited in name order so
/// the answer does not depend on list order.
pub fn diagnose(pods: &[Pod], gpu: GpuRequest<'_>) -> Option<Problem> {
    let mut sorted: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    let mut found: Vec<Problem> = Vec::new();
    for pod in &sorted {
        let statuses = pod.status.iter().flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        });
        let before = found.len();
        for cs in statuses {
            if let Some(p) = image_pull_problem(cs).or_else(|| crash_loop_problem(cs)) {
                found.push(p);
            }
        }
        if let Some(p) = scheduling_problem(pod, gpu) {
            found.push(p);
        }
        // In a group, which member blocks it is what a human needs.
        if let Some(m) = super::groups::member(pod) {
            for p in &mut found[before..] {
                p.message = format!("{}: {}", super::groups::describe(m), p.message);
            }
        }
    }
    let rank = |r: &str| match r {
        reasons::IMAGE_PULL_FAILED => 0,
        reasons::CRASH_LOOPING => 1,
        reasons::INSUFFICIENT_GPU => 2,
        _ => 3,
    };
    let first = found.iter().min_by_key(|p| rank(p.reason))?.clone();
    let same = found.iter().filter(|p| p.reason == first.reason).count();
    Some(if same > 1 {
        Problem {
            reason: first.reason,
            message: format!("{} ({same} pods)", first.message),
        }
    } else {
        first
    })
}

/// True when no pod is there to judge yet, or the scheduler has not looked
/// at one of them: what diagnosis finds (or does not) is not final.
pub fn undecided(pods: &[Pod]) -> bool {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    live.is_empty()
        || live.iter().any(|p| {
            !p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled"))
        })
}

fn image_pull_problem(cs: &ContainerStatus) -> Option<Problem> {
    let waiting = cs.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    if !matches!(
        reason,
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull"
    ) {
        return None;
    }
    let detail = waiting.message.as_deref().map(one_line).unwrap_or_default();
    Some(Problem {
        reason: reasons::IMAGE_PULL_FAILED,
        message: format!(
            "cannot pull image {:?} ({reason}){}; check the image name and tag and the pull secret",
            cs.image,
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        ),
    })
}

fn crash_loop_problem(cs: &ContainerStatus) -> Option<Problem> {
    let state = cs.state.as_ref()?;
    let backing_off = state
        .waiting
        .as_ref()
        .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"));
    // A real kubelet shows CrashLoopBackOff only from its next sync after a
    // crash (up to 15 s later) until the restart: between, the container is
    // `terminated`, or running again and not yet started. Judged by
    // CrashLoopBackOff alone, the status flapped with every restart. Two
    // exits (this run's and the one before) of a container that never got
    // started since are a loop, whatever the kubelet shows this second.
    let exits = cs.restart_count + i32::from(state.terminated.is_some());
    let starting_again = state.running.is_some() && cs.started != Some(true);
    let looping =
        backing_off || (!cs.ready && exits >= 2 && (state.terminated.is_some() || starting_again));
    if !looping {
        return None;
    }
    let last = state
        .terminated
        .as_ref()
        .or_else(|| cs.last_state.as_ref()?.terminated.as_ref())
        .map(|t| {
            format!(
                "; last exit: {} (code {})",
                t.reason.as_deref().unwrap_or("Error"),
                t.exit_code
            )
        })
        .unwrap_or_default();
    let restarts = match cs.restart_count {
        1 => "1 restart".to_string(),
        n => format!("{n} restarts"),
    };
    Some(Problem {
        reason: reasons::CRASH_LOOPING,
        message: format!(
            "container {} is crash-looping after {restarts}{last}; see `kubectl logs --previous`",
            cs.name
        ),
    })
}

/// The scheduler's verdict on a pod it could not place: its
/// `PodScheduled=False, Unschedulable` condition.
fn unschedulable(pod: &Pod) -> Option<&PodCondition> {
    pod.status.as_ref()?.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    })
}

/// Whether the scheduler's message names `resource` as what no node has
/// enough of ("0/4 nodes are available: 3 Insufficient nvidia.com/gpu, ...").
fn short_of(message: &str, resource: &str) -> bool {
    message.contains(&format!("Insufficient {resource}"))
}

/// The scheduler's condition, when `pod` waits because no node has enough
/// free `resource`: the closed loops of surge and canary act on this alone.
pub fn waiting_for<'a>(pod: &'a Pod, resource: &str) -> Option<&'a PodCondition> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    unschedulable(pod).filter(|c| short_of(c.message.as_deref().unwrap_or_default(), resource))
}

fn scheduling_problem(pod: &Pod, gpu: GpuRequest<'_>) -> Option<Problem> {
    let cond = unschedulable(pod)?;
    let scheduler = one_line(cond.message.as_deref().unwrap_or("no node fits the pod"));
    if gpu.gpus > 0 && short_of(&scheduler, gpu.resource) {
        Some(Problem {
            reason: reasons::INSUFFICIENT_GPU,
            message: format!(
                "no node has {} free {} for a replica: {scheduler:?}; free GPUs, add GPU nodes, or lower spec.resources.gpus or spec.replicas",
                gpu.gpus, gpu.resource
            ),
        })
    } else {
        Some(Problem {
            reason: reasons::UNSCHEDULABLE,
            message: format!(
                "pods cannot be scheduled: {scheduler:?}; check nodeSelector, tolerations and resources"
            ),
        })
    }
}

/// Status messages are one line: kubectl prints them in columns.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub fn pod(name: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "status": status}))
            .expect("pod")
    }

    pub fn unschedulable(name: &str, message: &str) -> Pod {
        pod(
            name,
            json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}),
        )
    }

    pub fn waiting(name: &str, reason: &str, message: &str) -> Pod {
        pod(
            name,
            json!({"phase": "Pending", "containerStatuses": [{
            "name": "server", "image": "vllm/vllm-openai:nope", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}}]}),
        )
    }

    const GPU: GpuRequest<'static> = GpuRequest {
        gpus: 2,
        resource: "nvidia.com/gpu",
    };

    #[test]
    fn gpu_shortage_quotes_the_scheduler_and_the_request() {
        let p = diagnose(
            &[unschedulable(
                "a",
                "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            )],
            GPU,
        )
        .expect("problem");
        assert_eq!(p.reason, "InsufficientGPU");
        assert!(
            p.message
                .contains("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
            "{}",
            p.message
        );
        assert!(p.message.contains("2 free nvidia.com/gpu"), "{}", p.message);
    }

    #[test]
    fn other_scheduling_failures_are_unschedulable() {
        let p = diagnose(
            &[unschedulable(
                "a",
                "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            )],
            GPU,
        )
        .expect("problem");
        assert_eq!(p.reason, "Unschedulable");
        assert!(p.message.contains("node affinity"), "{}", p.message);
    }

    #[test]
    fn a_cpu_only_model_is_never_short_of_gpus() {
        let cpu = GpuRequest {
            gpus: 0,
            resource: "nvidia.com/gpu",
        };
        let p = diagnose(
            &[unschedulable(
                "a",
                "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
            )],
            cpu,
        )
        .expect("problem");
        assert_eq!(p.reason, "Unschedulable");
    }

    #[test]
    fn image_pull_back_off_names_the_image() {
        for reason in ["ErrImagePull", "ImagePullBackOff"] {
            let p = diagnose(
                &[waiting(
                    "a",
                    reason,
                    "Back-off pulling image \"vllm/vllm-openai:nope\"",
                )],
                GPU,
            )
            .expect("problem");
            assert_eq!(p.reason, "ImagePullFailed");
            assert!(p.message.contains("vllm/vllm-openai:nope"), "{}", p.message);
        }
    }

    #[test]
    fn crash_loop_reports_the_last_exit() {
        let p = pod(
            "a",
            json!({"containerStatuses": [{
            "name": "server", "image": "i", "imageID": "", "ready": false, "restartCount": 7,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        let p = diagnose(&[p], GPU).expect("problem");
        assert_eq!(p.reason, "CrashLooping");
        assert!(
            p.message.contains("7 restarts") && p.message.contains("OOMKilled (code 137)"),
            "{}",
            p.message
        );
    }

    /// A container's states as the real node (`../shared/k8s` node-up,
    /// kubelet v1.32) showed them for a server that exits with code 3 one
    /// second after each start, in order.
    fn real_crash_timeline() -> Vec<(&'static str, serde_json::Value)> {
        let exit = json!({"terminated": {"exitCode": 3, "reason": "Error"}});
        let status =
            |restarts: i32, ready: bool, state: serde_json::Value, last: &serde_json::Value| {
                json!({"containerStatuses": [{"name": "server", "image": "i", "imageID": "",
                "ready": ready, "started": ready, "restartCount": restarts,
                "state": state, "lastState": last}]})
            };
        let none = json!({});
        let running = json!({"running": {}});
        let back_off = |s: u32| {
            json!({"waiting": {"reason": "CrashLoopBackOff",
                "message": format!("back-off {s}s restarting failed container=server pod=p_ns(uid)")}})
        };
        vec![
            (
                "0.7 s: first start",
                status(0, true, running.clone(), &none),
            ),
            ("1.7 s: first exit", status(0, false, exit.clone(), &none)),
            (
                "2.7 s: restarted at once",
                status(1, true, running.clone(), &exit),
            ),
            ("3.7 s: second exit", status(1, false, exit.clone(), &exit)),
            (
                "18.2 s: the next sync",
                status(1, false, back_off(10), &exit),
            ),
            (
                "18.7 s: third start",
                status(2, false, running.clone(), &exit),
            ),
            ("19.7 s: third exit", status(2, false, exit.clone(), &exit)),
            ("34.2 s", status(2, false, back_off(20), &exit)),
        ]
    }

    #[test]
    fn a_real_crash_loop_is_reported_from_the_second_exit_and_never_flaps() {
        let verdicts: Vec<(&str, Option<&'static str>)> = real_crash_timeline()
            .into_iter()
            .map(|(when, s)| (when, diagnose(&[pod("p", s)], GPU).map(|p| p.reason)))
            .collect();
        let looping = Some(reasons::CRASH_LOOPING);
        assert_eq!(
            verdicts,
            [
                ("0.7 s: first start", None),
                ("1.7 s: first exit", None),
                ("2.7 s: restarted at once", None),
                ("3.7 s: second exit", looping),
                ("18.2 s: the next sync", looping),
                ("18.7 s: third start", looping),
                ("19.7 s: third exit", looping),
                ("34.2 s", looping),
            ]
        );
        let (_, second_exit) = &real_crash_timeline()[3];
        let p = diagnose(&[pod("p", second_exit.clone())], GPU).expect("looping");
        assert_eq!(
            p.message,
            "container server is crash-looping after 1 restart; last exit: Error (code 3); see `kubectl logs --previous`"
        );
    }

    #[test]
    fn a_restarted_container_that_started_is_not_looping() {
        let p = pod(
            "a",
            json!({"containerStatuses": [{"name": "server", "image": "i", "imageID": "",
                "ready": false, "started": true, "restartCount": 4, "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}),
        );
        assert_eq!(diagnose(&[p], GPU), None);
    }

    #[test]
    fn healthy_and_starting_pods_are_not_problems() {
        let starting = waiting("a", "ContainerCreating", "");
        let running = pod(
            "b",
            json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}),
        );
        assert_eq!(diagnose(&[starting, running], GPU), None);
    }

    #[test]
    fn precedence_and_counting_do_not_depend_on_order() {
        let a = unschedulable(
            "a",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        );
        let b = waiting("b", "ImagePullBackOff", "");
        let c = waiting("c", "ImagePullBackOff", "");
        let one = diagnose(&[a.clone(), b.clone(), c.clone()], GPU);
        let two = diagnose(&[c, a, b], GPU);
        assert_eq!(one, two);
        let p = one.expect("problem");
        assert_eq!(p.reason, "ImagePullFailed");
        assert!(p.message.ends_with("(2 pods)"), "{}", p.message);
    }

    #[test]
    fn a_group_member_that_blocks_is_named_by_its_place() {
        let mut worker = unschedulable(
            "llama-0-1",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        );
        worker.metadata.labels = Some(
            [
                ("leaderworkerset.sigs.k8s.io/group-index", "0"),
                ("leaderworkerset.sigs.k8s.io/worker-index", "1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let p = diagnose(&[worker], GPU).expect("a problem");
        assert_eq!(p.reason, reasons::INSUFFICIENT_GPU);
        assert!(
            p.message
                .starts_with("worker 1 of group 0: no node has 2 free nvidia.com/gpu"),
            "{}",
            p.message
        );
    }
}
