//! Automatic rollback of a canary that cannot serve.
//!
//! A canary that crash-loops, cannot pull its image or misses its progress
//! deadline is scaled to 0 and gets no traffic; the stable track is left
//! alone. The decision is kept on the canary Deployment itself, in an
//! annotation naming the pod template it was taken for, so it survives
//! operator restarts and leader changes, needs no memory in the operator,
//! and ends exactly when the canary's pod template changes (a new image, new
//! args): a change of weight or replicas alone does not retry a template
//! that already failed.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use super::diagnosis::{GpuRequest, diagnose};
use super::fingerprint::fingerprint;
use super::reasons;
use super::rollout::{DeploymentState, Rollout, rollout};

/// The annotation on the canary Deployment that holds the rollback.
pub const ANNOTATION: &str = "serving.modelservice.dev/rolled-back";

/// A rollback in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolledBack {
    /// The fingerprint of the pod template that failed.
    pub template: String,
    /// Why: CrashLooping, ImagePullFailed or ProgressDeadlineExceeded.
    pub reason: String,
    pub message: String,
}

/// The fingerprint of a Deployment's pod template.
pub fn template_fingerprint(d: &Deployment) -> String {
    serde_json::to_value(&d.spec.template)
        .map(|t| fingerprint(&t))
        .unwrap_or_default()
}

/// Why the canary is Degraded, if it is, from its Deployment and its pods:
/// only the causes that no wait will fix. A canary waiting for GPUs is not
/// rolled back, not even past its progress deadline: it gets no weight
/// until it is ready, it may yet be, and the scarce GPUs are the cluster's
/// fault, not the new version's.
pub fn cause(
    deployment: Option<DeploymentState<'_>>,
    pods: &[Pod],
    gpu: GpuRequest<'_>,
) -> Option<(String, String)> {
    let problem = diagnose(pods, gpu);
    if let Some(p) = &problem
        && matches!(
            p.reason,
            reasons::CRASH_LOOPING | reasons::IMAGE_PULL_FAILED
        )
    {
        return Some((p.reason.to_string(), p.message.clone()));
    }
    if problem
        .as_ref()
        .is_some_and(|p| p.reason == reasons::INSUFFICIENT_GPU)
    {
        return None;
    }
    match rollout(deployment) {
        Rollout::Stuck { message } => Some((reasons::PROGRESS_DEADLINE_EXCEEDED.into(), message)),
        _ => None,
    }
}

/// The rollback in force for the `desired` canary: the one already on the
/// cached canary (`kept`, the annotation's text) while the template is the
/// same, else a new one when there is a `cause`. A hand-broken annotation
/// counts as none.
pub fn decide(
    desired: &Deployment,
    kept: Option<&str>,
    cause: Option<(String, String)>,
) -> Option<RolledBack> {
    let template = template_fingerprint(desired);
    if let Some(k) = kept.and_then(|k| serde_json::from_str::<RolledBack>(k).ok())
        && k.template == template
    {
        return Some(k);
    }
    cause.map(|(reason, message)| RolledBack {
        template,
        reason,
        message,
    })
}

/// Scales the canary to 0 and records why.
pub fn roll_back(d: &mut Deployment, rb: &RolledBack) {
    d.spec.replicas = Some(0);
    let text = serde_json::to_string(rb).unwrap_or_default();
    d.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION.into(), text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::diagnosis::tests::waiting;
    use serde_json::json;

    fn dep(image: &str) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "m-canary"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "server", "image": image}]}}}}))
        .expect("deployment")
    }

    const GPU: GpuRequest<'static> = GpuRequest {
        gpus: 1,
        resource: "nvidia.com/gpu",
    };

    #[test]
    fn a_crash_loop_or_a_failed_pull_rolls_back_and_a_gpu_wait_does_not() {
        let crash = [waiting("m-canary-1", "CrashLoopBackOff", "back-off")];
        assert_eq!(
            cause(None, &crash, GPU).map(|c| c.0),
            Some(reasons::CRASH_LOOPING.to_string())
        );
        let pull = [waiting("m-canary-1", "ImagePullBackOff", "not found")];
        assert_eq!(
            cause(None, &pull, GPU).map(|c| c.0),
            Some(reasons::IMAGE_PULL_FAILED.to_string())
        );
        let pending = [crate::core::diagnosis::tests::unschedulable(
            "m-canary-1",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        )];
        assert_eq!(cause(None, &pending, GPU), None);
    }

    #[test]
    fn a_canary_waiting_for_gpus_is_not_rolled_back_even_past_its_deadline() {
        let st: k8s_openapi::api::apps::v1::DeploymentStatus = serde_json::from_value(json!({
            "observedGeneration": 1,
            "conditions": [{"type": "Progressing", "status": "False",
                "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"m-canary-1\" has timed out progressing."}]}))
        .expect("status");
        let state = DeploymentState {
            generation: 1,
            replicas: Some(1),
            status: Some(&st),
        };
        let gpu = GPU;
        let short = crate::core::diagnosis::tests::unschedulable(
            "m-canary-1",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        );
        assert_eq!(cause(Some(state), std::slice::from_ref(&short), gpu), None);
        // Without pods that say why, a stuck canary still rolls back.
        assert_eq!(
            cause(Some(state), &[], gpu).map(|c| c.0),
            Some(reasons::PROGRESS_DEADLINE_EXCEEDED.to_string())
        );
        // And a crash loop beside a wait for GPUs rolls back.
        let crashing = waiting("m-canary-2", "CrashLoopBackOff", "back-off");
        assert_eq!(
            cause(Some(state), &[short, crashing], gpu).map(|c| c.0),
            Some(reasons::CRASH_LOOPING.to_string())
        );
    }

    #[test]
    fn a_stuck_canary_rolls_back() {
        let d: Deployment = serde_json::from_value(json!({"metadata": {"generation": 1},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Progressing", "status": "False",
                "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet m-canary-1 has timed out progressing."}]}}))
        .expect("deployment");
        assert_eq!(
            cause(Some((&d).into()), &[], GPU).map(|c| c.0),
            Some(reasons::PROGRESS_DEADLINE_EXCEEDED.to_string())
        );
    }

    #[test]
    fn the_rollback_stays_until_the_template_changes() {
        let bad = dep("crashloop:1");
        let rb =
            decide(&bad, None, Some(("CrashLooping".into(), "m".into()))).expect("rolled back");
        let kept = serde_json::to_string(&rb).expect("json");
        assert_eq!(
            decide(&bad, Some(&kept), None),
            Some(rb.clone()),
            "no cause now: pods are gone"
        );
        assert_eq!(
            decide(&dep("good:2"), Some(&kept), None),
            None,
            "a new template tries again"
        );
        assert_eq!(decide(&bad, Some("not json"), None), None);
        let mut d = bad.clone();
        roll_back(&mut d, &rb);
        assert_eq!(d.spec.replicas, Some(0));
        assert_eq!(
            template_fingerprint(&d),
            rb.template,
            "only metadata and replicas change"
        );
    }
}
