//! The status a ModelService should have, from what was observed.
//!
//! Pure: the clock comes in as `now`, and timestamps change only on a
//! condition's transition, so the same world gives a byte-identical status and
//! the reconcile does not write (or wake itself up) again.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::conditions::{Wanted, find, merge};
use super::diagnosis::{self, GpuRequest, Problem, diagnose};
use super::download::WeightsSeen;
use super::labels::selector_string;
use super::reasons;
use super::rollout::{DeploymentState, Rollout, rollout};
use super::strategy_status::{self, CanarySeen, RouteSeen};
use crate::api::{AutoscalerStatus, ModelServiceStatus, condition_types as ct};

/// Everything the status is computed from.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// `metadata.generation` of the ModelService acted on.
    pub generation: i64,
    /// The serving port, for the URL; `None` when the spec could not be read.
    pub port: Option<i32>,
    pub gpu: GpuRequest<'a>,
    /// A problem that stopped this reconcile before the children were
    /// applied: an invalid spec, or a write the API server refused.
    pub blocked: Option<Problem>,
    /// The Deployment as it is after this reconcile's apply.
    pub deployment: Option<DeploymentState<'a>>,
    /// The surge decision on that Deployment (`core::surge`), stated while
    /// its rollout runs.
    pub surge: Option<&'a str>,
    /// The pods of this ModelService, when they were read (see [`needs_pods`]).
    pub pods: &'a [Pod],
    /// KEDA, when it is the engine the spec asks for.
    pub autoscaler: Option<KedaSeen<'a>>,
    /// The canary, when the spec has one.
    pub canary: Option<CanarySeen<'a>>,
    /// The route, when the spec has one.
    pub route: Option<RouteSeen<'a>>,
    /// A group of pods that keeps being recreated (see `groups::recreating`).
    pub recreating: Option<Problem>,
    /// The replicas are groups of pods on a LeaderWorkerSet, which the
    /// counts above count.
    pub groups: bool,
    /// The weights, with `model.source`.
    pub weights: Option<&'a WeightsSeen>,
}

/// KEDA as observed for one ModelService.
#[derive(Clone, Copy, Debug)]
pub struct KedaSeen<'a> {
    /// Whether the cluster serves the ScaledObject API at all.
    pub installed: bool,
    /// The ScaledObject's status, as KEDA wrote it (none before KEDA acts).
    pub status: Option<&'a serde_json::Value>,
}

impl KedaSeen<'_> {
    /// One condition of the ScaledObject: (status, reason, message).
    fn condition(&self, type_: &str) -> Option<(String, String, String)> {
        let conds = self.status?.get("conditions")?.as_array()?;
        let c = conds
            .iter()
            .find(|c| c.get("type").and_then(|t| t.as_str()) == Some(type_))?;
        let field = |k: &str| {
            c.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        Some((field("status"), field("reason"), field("message")))
    }

    /// What status.autoscaler says.
    fn report(&self) -> AutoscalerStatus {
        let (ready, active) = (self.condition("Ready"), self.condition("Active"));
        AutoscalerStatus {
            engine: "KEDA".into(),
            ready: ready.as_ref().map(|c| c.0.clone()),
            active: active.as_ref().map(|c| c.0.clone()),
            message: ready.map(|c| c.2).filter(|m| !m.is_empty()),
        }
    }

    /// The problem KEDA has, if any: not installed, or its ScaledObject not Ready.
    fn problem(&self) -> Option<Problem> {
        if !self.installed {
            return Some(Problem {
                reason: reasons::AUTOSCALER_UNAVAILABLE,
                message: "autoscaling.engine is KEDA, but the cluster has no KEDA ScaledObject API (keda.sh/v1alpha1); install KEDA, or use engine HPA. The replicas stay as they are until then".into(),
            });
        }
        let (status, _, message) = self.condition("Ready")?;
        (status == "False").then(|| Problem {
            reason: reasons::AUTOSCALER_NOT_READY,
            message: format!("KEDA cannot scale this model: {message}"),
        })
    }
}

/// Whether reading pods could explain anything: only while the Deployment is
/// not complete. Ready models cost no pod reads at all.
pub fn needs_pods(deployment: Option<DeploymentState<'_>>) -> bool {
    matches!(
        rollout(deployment),
        Rollout::RollingOut { .. } | Rollout::Scaling { .. } | Rollout::Stuck { .. }
    )
}

/// The pod-level problem `previous` reported, while nothing says it is over:
/// a rollout's new pods that the Deployment controller or the scheduler
/// have not looked at yet have not fixed it. Without this, every rollout of
/// a model waiting for GPUs said "Recovered" and then the same Warning again.
fn still_open(previous: Option<&ModelServiceStatus>) -> Option<Problem> {
    let d = find(&previous?.conditions, ct::DEGRADED).filter(|c| c.status == "True")?;
    let reason = [
        reasons::IMAGE_PULL_FAILED,
        reasons::CRASH_LOOPING,
        reasons::INSUFFICIENT_GPU,
        reasons::UNSCHEDULABLE,
    ]
    .into_iter()
    .find(|r| *r == d.reason)?;
    Some(Problem {
        reason,
        message: d.message.clone(),
    })
}

/// Computes the new status. `previous` supplies transition times.
pub fn compute(
    previous: Option<&ModelServiceStatus>,
    o: &Observed<'_>,
    now: &Time,
) -> ModelServiceStatus {
    let state = rollout(o.deployment);
    let weights_problem = o.weights.and_then(WeightsSeen::problem);
    let problem = o.blocked.clone().or(weights_problem).or_else(|| {
        (!matches!(state, Rollout::Complete { .. }))
            .then(|| {
                // A group that starts over is said first: its new pods
                // show no crash of their own.
                o.recreating
                    .clone()
                    .or_else(|| diagnose(o.pods, o.gpu))
                    .or_else(|| {
                        let undecided = matches!(state, Rollout::Missing | Rollout::NotObserved)
                            || diagnosis::undecided(o.pods);
                        undecided.then(|| still_open(previous)).flatten()
                    })
            })
            .flatten()
    });

    let (ready, progressing) = match &state {
        Rollout::Complete { desired: 0, .. } if o.autoscaler.is_some() => (
            Wanted::new(
                ct::READY,
                true,
                reasons::SCALED_TO_ZERO,
                "scaled to zero by KEDA while no request waits; the next request wakes it",
            ),
            Wanted::new(
                ct::PROGRESSING,
                false,
                reasons::ROLLOUT_COMPLETE,
                // How it was rolled out stays said: a fast rollout's verdict
                // is its first report (see `pacing`).
                with_decision("the current spec is rolled out".into(), o.surge),
            ),
        ),
        Rollout::Complete { available, desired } => (
            Wanted::new(
                ct::READY,
                true,
                reasons::AVAILABLE,
                format!("{available}/{desired} replicas ready"),
            ),
            Wanted::new(
                ct::PROGRESSING,
                false,
                reasons::ROLLOUT_COMPLETE,
                // How it was rolled out stays said: a fast rollout's verdict
                // is its first report (see `pacing`).
                with_decision("the current spec is rolled out".into(), o.surge),
            ),
        ),
        Rollout::Missing | Rollout::NotObserved => {
            let m = if o.groups {
                "waiting for the LeaderWorkerSet controller to pick up the current spec"
            } else {
                "waiting for the Deployment controller to pick up the current spec"
            };
            (
                Wanted::new(ct::READY, false, reasons::ROLLING_OUT, m),
                Wanted::new(
                    ct::PROGRESSING,
                    true,
                    reasons::ROLLING_OUT,
                    with_decision(m.into(), o.surge),
                ),
            )
        }
        Rollout::RollingOut {
            updated,
            desired,
            available,
            ..
        } => {
            let m = format!(
                "rolling out the current spec: {updated}/{desired} {} updated, {available} available",
                if o.groups { "groups" } else { "pods" }
            );
            (
                Wanted::new(ct::READY, false, reasons::ROLLING_OUT, m.clone()),
                Wanted::new(
                    ct::PROGRESSING,
                    true,
                    reasons::ROLLING_OUT,
                    with_decision(m, o.surge),
                ),
            )
        }
        Rollout::Scaling { available, desired } => {
            let m = format!("scaling to {desired} replicas: {available} available");
            (
                Wanted::new(ct::READY, false, reasons::SCALING, m.clone()),
                Wanted::new(ct::PROGRESSING, true, reasons::SCALING, m),
            )
        }
        Rollout::Stuck { message } => {
            let m = format!("the rollout is stuck: {message}");
            (
                Wanted::new(
                    ct::READY,
                    false,
                    reasons::PROGRESS_DEADLINE_EXCEEDED,
                    m.clone(),
                ),
                Wanted::new(
                    ct::PROGRESSING,
                    false,
                    reasons::PROGRESS_DEADLINE_EXCEEDED,
                    m,
                ),
            )
        }
    };

    let (ready, progressing, degraded) = match (&problem, &state) {
        (Some(p), _) => {
            // The specific cause is the most useful Ready reason: it is what
            // `kubectl get` shows in the Reason column.
            let progressing = if o.blocked.is_some() {
                Wanted::new(ct::PROGRESSING, false, p.reason, p.message.clone())
            } else {
                progressing
            };
            // Pod problems are only looked for while not complete, and a
            // blocked reconcile means the current spec is not what runs: in
            // both cases Ready is False.
            let ready = Wanted::new(ct::READY, false, p.reason, p.message.clone());
            (
                ready,
                progressing,
                Wanted::new(ct::DEGRADED, true, p.reason, p.message.clone()),
            )
        }
        (None, Rollout::Stuck { message }) => {
            let d = Wanted::new(
                ct::DEGRADED,
                true,
                reasons::PROGRESS_DEADLINE_EXCEEDED,
                format!("the rollout is stuck: {message}"),
            );
            (ready, progressing, d)
        }
        (None, _) => {
            // An autoscaler that cannot act, or a route that cannot exist,
            // needs a human, but the model still serves at its current
            // size: only Degraded says so.
            let side = o
                .recreating
                .clone()
                .or_else(|| o.autoscaler.and_then(|k| k.problem()))
                .or_else(|| o.route.as_ref().and_then(strategy_status::route_problem));
            let degraded = match side {
                Some(p) => Wanted::new(ct::DEGRADED, true, p.reason, p.message),
                None => Wanted::new(
                    ct::DEGRADED,
                    false,
                    reasons::AS_EXPECTED,
                    "nothing needs attention",
                ),
            };
            (ready, progressing, degraded)
        }
    };

    // While the spec's weights download, the current spec is not what
    // serves (the pods wait for them, or the previous weights serve): Ready
    // says so and how far it has got, unless something worse is wrong.
    let (ready, progressing) = match o.weights.and_then(WeightsSeen::waiting_message) {
        Some(m) if problem.is_none() => (
            Wanted::new(ct::READY, false, reasons::DOWNLOADING_WEIGHTS, m.clone()),
            Wanted::new(ct::PROGRESSING, true, reasons::DOWNLOADING_WEIGHTS, m),
        ),
        _ => (ready, progressing),
    };

    // CanaryHealthy is ours only while there is a canary: without one, a
    // previous one is dropped, not kept as someone else's.
    let previous_conditions: Vec<_> = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|c| o.canary.is_some() || c.type_ != ct::CANARY_HEALTHY)
        .cloned()
        .collect();
    let mut wanted = vec![ready, progressing, degraded];
    wanted.extend(o.canary.as_ref().map(strategy_status::canary_healthy));
    let dep_status = o.deployment.and_then(|d| d.status);
    ModelServiceStatus {
        observed_generation: Some(o.generation),
        replicas: Some(dep_status.and_then(|s| s.replicas).unwrap_or(0)),
        ready_replicas: Some(dep_status.and_then(|s| s.ready_replicas).unwrap_or(0)),
        selector: Some(selector_string(o.name)),
        url: o
            .port
            .map(|port| format!("http://{}.{}.svc:{port}", o.name, o.namespace)),
        conditions: merge(&previous_conditions, &wanted, o.generation, now),
        autoscaler: o.autoscaler.map(|k| Box::new(k.report())),
        tracks: o
            .canary
            .as_ref()
            .map(|c| strategy_status::tracks(o.deployment, c)),
        route: o
            .route
            .as_ref()
            .map(|r| Box::new(strategy_status::route(r))),
        model: o.weights.map(|w| Box::new(w.report())),
    }
}

/// A rollout's Progressing message, with how it replaces pods when that
/// was decided (surge or replace, and why): the one place a user sees why
/// a rollout had downtime, or did not.
fn with_decision(message: String, decision: Option<&str>) -> String {
    match decision {
        Some(d) => format!("{message}; {d}"),
        None => message,
    }
}

/// `now` at the API server's precision (whole seconds), so a status we write
/// compares equal to the same status read back.
pub fn now_seconds(now: k8s_openapi::jiff::Timestamp) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conditions::find;
    use crate::core::diagnosis::tests::{unschedulable, waiting};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn t(s: i64) -> Time {
        Time(Timestamp::from_second(s).expect("ts"))
    }

    fn dep(replicas: i32, st: serde_json::Value) -> Deployment {
        let mut st = st;
        st["observedGeneration"] = 1.into();
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "llama", "generation": 1},
            "spec": {"replicas": replicas, "selector": {}, "template": {}}, "status": st}))
        .expect("deployment")
    }

    fn complete() -> Deployment {
        dep(
            2,
            json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
        )
    }

    fn rolling() -> Deployment {
        dep(
            2,
            json!({"replicas": 2, "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}),
        )
    }

    fn observed<'a>(d: Option<&'a Deployment>, pods: &'a [Pod]) -> Observed<'a> {
        Observed {
            name: "llama",
            namespace: "ml",
            generation: 3,
            port: Some(8000),
            gpu: GpuRequest {
                gpus: 1,
                resource: "nvidia.com/gpu",
            },
            blocked: None,
            deployment: d.map(Into::into),
            surge: None,
            pods,
            autoscaler: None,
            canary: None,
            route: None,
            recreating: None,
            groups: false,
            weights: None,
        }
    }

    #[test]
    fn a_download_says_how_far_it_has_got_and_a_full_claim_needs_a_human() {
        use crate::core::download::{Download, Progress, WeightsSeen};
        let running = WeightsSeen {
            uri: "hf://org/m@abc".into(),
            download: Some(Download::Running(Some(Progress {
                done_bytes: 42,
                total_bytes: 100,
                bytes_per_second: 1,
            }))),
            serving: None,
        };
        let o = Observed {
            weights: Some(&running),
            ..observed(None, &[])
        };
        let s = compute(None, &o, &t(10));
        assert_eq!(cond(&s, ct::READY), ("False", reasons::DOWNLOADING_WEIGHTS));
        assert_eq!(
            cond(&s, ct::PROGRESSING),
            ("True", reasons::DOWNLOADING_WEIGHTS)
        );
        assert_eq!(cond(&s, ct::DEGRADED), ("False", reasons::AS_EXPECTED));
        let ready = find(&s.conditions, ct::READY).unwrap();
        assert!(ready.message.contains("42% of 100 B"), "{}", ready.message);
        assert_eq!(
            s.model.as_ref().map(|m| m.phase.as_str()),
            Some("Downloading")
        );

        let full = WeightsSeen {
            download: Some(Download::Failed {
                too_small: true,
                message: "the model needs 2.0 GiB, the claim has 1.0 GiB free of 1.0 GiB".into(),
            }),
            ..running
        };
        let o = Observed {
            weights: Some(&full),
            ..observed(None, &[])
        };
        let s = compute(None, &o, &t(10));
        assert_eq!(
            cond(&s, ct::READY),
            ("False", reasons::WEIGHTS_VOLUME_TOO_SMALL)
        );
        assert_eq!(
            cond(&s, ct::DEGRADED),
            ("True", reasons::WEIGHTS_VOLUME_TOO_SMALL)
        );
    }

    fn cond<'a>(s: &'a ModelServiceStatus, t: &str) -> (&'a str, &'a str) {
        let c = find(&s.conditions, t).expect("condition");
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn ready_when_fully_rolled_out() {
        let d = complete();
        let s = compute(None, &observed(Some(&d), &[]), &t(10));
        assert_eq!(cond(&s, "Ready"), ("True", "Available"));
        assert_eq!(
            find(&s.conditions, "Ready").map(|c| c.message.as_str()),
            Some("2/2 replicas ready")
        );
        assert_eq!(cond(&s, "Progressing"), ("False", "RolloutComplete"));
        assert_eq!(cond(&s, "Degraded"), ("False", "AsExpected"));
        assert_eq!((s.replicas, s.ready_replicas), (Some(2), Some(2)));
        assert_eq!(s.observed_generation, Some(3));
        assert!(
            s.conditions
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
        assert_eq!(s.url.as_deref(), Some("http://llama.ml.svc:8000"));
        assert_eq!(
            s.selector.as_deref(),
            Some("app.kubernetes.io/instance=llama,app.kubernetes.io/name=modelservice")
        );
    }

    #[test]
    fn not_ready_while_rolling_out() {
        let d = rolling();
        let s = compute(None, &observed(Some(&d), &[]), &t(10));
        assert_eq!(cond(&s, "Ready"), ("False", "RollingOut"));
        assert_eq!(cond(&s, "Progressing"), ("True", "RollingOut"));
        assert_eq!(cond(&s, "Degraded"), ("False", "AsExpected"));
    }

    #[test]
    fn scaling_is_told_apart_from_a_new_spec() {
        let d = dep(
            3,
            json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
        );
        let s = compute(None, &observed(Some(&d), &[]), &t(10));
        assert_eq!(cond(&s, "Progressing"), ("True", "Scaling"));
        assert_eq!(cond(&s, "Ready"), ("False", "Scaling"));
    }

    #[test]
    fn a_deployment_not_yet_observed_is_not_ready() {
        let mut d = complete();
        d.metadata.generation = Some(2);
        let s = compute(None, &observed(Some(&d), &[]), &t(10));
        assert_eq!(cond(&s, "Ready"), ("False", "RollingOut"));
    }

    #[test]
    fn gpu_shortage_is_degraded_and_is_the_ready_reason() {
        let d = rolling();
        let pods = [unschedulable(
            "llama-1",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        )];
        let s = compute(None, &observed(Some(&d), &pods), &t(10));
        assert_eq!(cond(&s, "Degraded"), ("True", "InsufficientGPU"));
        assert_eq!(cond(&s, "Ready"), ("False", "InsufficientGPU"));
        assert_eq!(cond(&s, "Progressing"), ("True", "RollingOut"));
    }

    #[test]
    fn a_gpu_shortage_stays_until_new_pods_are_judged() {
        let short = [unschedulable(
            "llama-1",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        )];
        let before = compute(None, &observed(Some(&rolling()), &short), &t(10));
        // A rollout starts: the Deployment controller has not looked, and no
        // pod is read; then a new pod the scheduler has not looked at.
        let mut unobserved = rolling();
        unobserved.metadata.generation = Some(9);
        let s = compute(Some(&before), &observed(Some(&unobserved), &[]), &t(11));
        assert_eq!(cond(&s, "Degraded"), ("True", "InsufficientGPU"));
        let fresh = crate::core::diagnosis::tests::pod("llama-2", json!({"phase": "Pending"}));
        let s = compute(
            Some(&before),
            &observed(Some(&rolling()), std::slice::from_ref(&fresh)),
            &t(12),
        );
        assert_eq!(cond(&s, "Degraded"), ("True", "InsufficientGPU"));
        // The scheduler placed it: that is recovery.
        let placed = crate::core::diagnosis::tests::pod(
            "llama-2",
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}),
        );
        let s = compute(
            Some(&before),
            &observed(Some(&rolling()), std::slice::from_ref(&placed)),
            &t(13),
        );
        assert_eq!(cond(&s, "Degraded"), ("False", "AsExpected"));
    }

    #[test]
    fn image_pull_failure_is_degraded() {
        let d = rolling();
        let pods = [waiting(
            "llama-1",
            "ImagePullBackOff",
            "Back-off pulling image",
        )];
        let s = compute(None, &observed(Some(&d), &pods), &t(10));
        assert_eq!(cond(&s, "Degraded"), ("True", "ImagePullFailed"));
    }

    #[test]
    fn recovery_clears_degraded_by_itself() {
        let d = rolling();
        let pods = [unschedulable(
            "llama-1",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        )];
        let bad = compute(None, &observed(Some(&d), &pods), &t(10));
        let healthy = complete();
        let good = compute(Some(&bad), &observed(Some(&healthy), &[]), &t(20));
        assert_eq!(cond(&good, "Degraded"), ("False", "AsExpected"));
        assert_eq!(cond(&good, "Ready"), ("True", "Available"));
        let degraded = find(&good.conditions, "Degraded").expect("degraded");
        assert_eq!(
            degraded.last_transition_time,
            t(20),
            "the flip is a transition"
        );
    }

    #[test]
    fn pod_problems_are_ignored_once_complete() {
        let d = complete();
        let pods = [waiting("old", "ImagePullBackOff", "")];
        let s = compute(None, &observed(Some(&d), &pods), &t(10));
        assert_eq!(cond(&s, "Degraded"), ("False", "AsExpected"));
    }

    #[test]
    fn stuck_rollout_is_degraded_and_not_progressing() {
        let d = dep(
            1,
            json!({"replicas": 1, "conditions": [{"type": "Progressing", "status": "False",
            "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"llama-1\" has timed out progressing."}]}),
        );
        let s = compute(None, &observed(Some(&d), &[]), &t(10));
        assert_eq!(
            cond(&s, "Progressing"),
            ("False", "ProgressDeadlineExceeded")
        );
        assert_eq!(cond(&s, "Degraded"), ("True", "ProgressDeadlineExceeded"));
        assert_eq!(cond(&s, "Ready"), ("False", "ProgressDeadlineExceeded"));
    }

    #[test]
    fn an_invalid_spec_blocks_everything_with_an_actionable_message() {
        let mut o = observed(None, &[]);
        o.blocked = Some(Problem {
            reason: reasons::INVALID_SPEC,
            message: "spec.gpuResource \"gpu\" is not a valid extended resource name".into(),
        });
        let s = compute(None, &o, &t(10));
        assert_eq!(cond(&s, "Ready"), ("False", "InvalidSpec"));
        assert_eq!(cond(&s, "Degraded"), ("True", "InvalidSpec"));
        assert_eq!(cond(&s, "Progressing"), ("False", "InvalidSpec"));
        assert!(
            find(&s.conditions, "Degraded").is_some_and(|c| c.message.contains("spec.gpuResource"))
        );
    }

    #[test]
    fn a_refused_write_means_the_current_spec_is_not_ready() {
        // The old pods may still serve, but Ready is about the current spec.
        let d = complete();
        let mut o = observed(Some(&d), &[]);
        o.blocked = Some(Problem {
            reason: reasons::RECONCILE_FAILED,
            message: "forbidden".into(),
        });
        let s = compute(None, &o, &t(10));
        assert_eq!(cond(&s, "Degraded"), ("True", "ReconcileFailed"));
        assert_eq!(cond(&s, "Ready"), ("False", "ReconcileFailed"));
        assert_eq!(
            s.ready_replicas,
            Some(2),
            "the counts still describe what runs"
        );
    }

    #[test]
    fn the_same_world_gives_a_byte_identical_status() {
        let d = rolling();
        let pods = [unschedulable(
            "llama-1",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        )];
        let a = compute(None, &observed(Some(&d), &pods), &t(10));
        let b = compute(Some(&a), &observed(Some(&d), &pods), &t(500));
        assert_eq!(
            serde_json::to_string(&a).expect("json"),
            serde_json::to_string(&b).expect("json")
        );
    }

    #[test]
    fn pods_are_read_only_when_they_can_explain_something() {
        assert!(!needs_pods(None));
        let mut unobserved = rolling();
        unobserved.metadata.generation = Some(9);
        assert!(
            !needs_pods(Some((&unobserved).into())),
            "nothing to diagnose before the controller acts"
        );
        assert!(!needs_pods(Some((&complete()).into())));
        assert!(needs_pods(Some((&rolling()).into())));
    }

    #[test]
    fn the_surge_decision_is_stated_while_the_rollout_runs_and_once_it_is_done() {
        let d = rolling();
        let mut o = observed(Some(&d), &[]);
        o.surge = Some("surging: node gpu-3 has 2 free nvidia.com/gpu");
        let s = compute(None, &o, &t(10));
        assert_eq!(
            find(&s.conditions, "Progressing").map(|c| c.message.as_str()),
            Some(
                "rolling out the current spec: 0/2 pods updated, 0 available; surging: node gpu-3 has 2 free nvidia.com/gpu"
            )
        );
        assert!(
            find(&s.conditions, "Ready").is_some_and(|c| !c.message.contains("surging")),
            "Ready says what serves, not how the rollout goes"
        );
        let done = complete();
        let mut o = observed(Some(&done), &[]);
        o.surge = Some("surging: node gpu-3 has 2 free nvidia.com/gpu");
        let s = compute(None, &o, &t(10));
        assert_eq!(
            find(&s.conditions, "Progressing").map(|c| c.message.as_str()),
            Some("the current spec is rolled out; surging: node gpu-3 has 2 free nvidia.com/gpu"),
            "a rollout that is done before its first report still says how it went"
        );
    }

    fn zero() -> Deployment {
        dep(
            0,
            json!({"conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
        )
    }

    fn keda_says(ready: &str, message: &str) -> serde_json::Value {
        json!({"conditions": [
            {"type": "Ready", "status": ready, "reason": "ScaledObjectReady", "message": message},
            {"type": "Active", "status": "False", "reason": "ScalerNotActive", "message": ""}]})
    }

    /// The status of `d` with KEDA as the engine, having said `keda`.
    fn with_keda(d: &Deployment, keda: Option<&serde_json::Value>) -> ModelServiceStatus {
        let mut o = observed(Some(d), &[]);
        o.autoscaler = Some(KedaSeen {
            installed: keda.is_some(),
            status: keda,
        });
        compute(None, &o, &t(10))
    }

    #[test]
    fn zero_replicas_by_keda_is_ready_scaled_to_zero_with_the_url() {
        let (d, keda) = (zero(), keda_says("True", "ready for scaling"));
        let s = with_keda(&d, Some(&keda));
        assert_eq!(cond(&s, "Ready"), ("True", "ScaledToZero"));
        assert_eq!(cond(&s, "Degraded"), ("False", "AsExpected"));
        assert_eq!(s.url.as_deref(), Some("http://llama.ml.svc:8000"));
        let a = s.autoscaler.expect("status.autoscaler");
        assert_eq!(
            (a.engine.as_str(), a.ready.as_deref(), a.active.as_deref()),
            ("KEDA", Some("True"), Some("False"))
        );
        // Zero replicas without KEDA is not "scaled to zero".
        let s = compute(None, &observed(Some(&d), &[]), &t(10));
        assert_eq!(cond(&s, "Ready"), ("True", "Available"));
    }

    #[test]
    fn a_failing_trigger_is_degraded_and_leaves_ready_alone() {
        let (d, keda) = (zero(), keda_says("False", "error querying prometheus"));
        let s = with_keda(&d, Some(&keda));
        assert_eq!(cond(&s, "Ready"), ("True", "ScaledToZero"));
        assert_eq!(cond(&s, "Degraded"), ("True", "AutoscalerNotReady"));
        let m = find(&s.conditions, "Degraded").map(|c| c.message.clone());
        assert!(
            m.as_deref()
                .is_some_and(|m| m.contains("error querying prometheus")),
            "{m:?}"
        );
    }

    #[test]
    fn keda_missing_is_degraded_while_the_model_serves() {
        let s = with_keda(&complete(), None);
        assert_eq!(cond(&s, "Ready"), ("True", "Available"));
        assert_eq!(cond(&s, "Degraded"), ("True", "AutoscalerUnavailable"));
    }

    #[test]
    fn now_is_truncated_to_seconds() {
        let ts = Timestamp::from_millisecond(1_700_000_000_987).expect("ts");
        assert_eq!(now_seconds(ts), t(1_700_000_000));
    }

    #[test]
    fn groups_are_counted_and_named_as_groups() {
        let mut o = observed(None, &[]);
        o.groups = true;
        let s = compute(None, &o, &t(10));
        assert_eq!(cond(&s, "Ready").1, "RollingOut",);
        assert!(
            find(&s.conditions, "Ready")
                .is_some_and(|c| c.message.contains("LeaderWorkerSet controller"))
        );
        let d = rolling();
        let mut o = observed(Some(&d), &[]);
        o.groups = true;
        let s = compute(None, &o, &t(10));
        assert!(
            find(&s.conditions, "Ready").is_some_and(|c| c.message.contains("0/2 groups updated")),
            "{:?}",
            s.conditions
        );
    }
}
