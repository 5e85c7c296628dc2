//! How far the Deployment is in rolling out the current spec.
//!
//! Follows the rules `kubectl rollout status` uses, so what we report matches
//! what an operator on call sees in kubectl.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};

/// What a rollout is judged from: the Deployment's generation, its replica
/// count and its status. The operator reads these from its lean cache; a
/// whole typed Deployment converts for callers that have one.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeploymentState<'a> {
    pub generation: i64,
    /// `spec.replicas`; unset means the API server's default, 1.
    pub replicas: Option<i32>,
    pub status: Option<&'a DeploymentStatus>,
}

impl<'a> From<&'a Deployment> for DeploymentState<'a> {
    fn from(d: &'a Deployment) -> Self {
        Self {
            generation: d.metadata.generation.unwrap_or(0),
            replicas: d.spec.replicas,
            status: d.status.as_ref(),
        }
    }
}

/// The Deployment's rollout, summarised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rollout {
    /// The Deployment does not exist (yet).
    Missing,
    /// The Deployment controller has not yet seen the latest Deployment spec.
    NotObserved,
    /// Pods of the new spec are replacing old ones.
    RollingOut {
        updated: i32,
        desired: i32,
        available: i32,
        total: i32,
    },
    /// Every pod runs the current spec; the count is moving toward `desired`.
    Scaling { available: i32, desired: i32 },
    /// No progress within the Deployment's progress deadline.
    Stuck { message: String },
    /// Every desired pod runs the current spec and is available.
    Complete { available: i32, desired: i32 },
}

/// Summarises `dep`'s rollout.
pub fn rollout(dep: Option<DeploymentState<'_>>) -> Rollout {
    let Some(dep) = dep else {
        return Rollout::Missing;
    };
    let generation = dep.generation;
    let Some(st) = dep.status else {
        return Rollout::NotObserved;
    };
    if st.observed_generation.unwrap_or(0) < generation {
        return Rollout::NotObserved;
    }
    if let Some(c) = st.conditions.iter().flatten().find(|c| {
        c.type_.as_deref() == Some("Progressing")
            && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    }) {
        return Rollout::Stuck {
            message: c
                .message
                .clone()
                .unwrap_or_else(|| "the rollout made no progress".into()),
        };
    }
    let desired = dep.replicas.unwrap_or(1);
    let updated = st.updated_replicas.unwrap_or(0);
    let total = st.replicas.unwrap_or(0);
    let available = st.available_replicas.unwrap_or(0);
    // The Deployment controller says "NewReplicaSetAvailable" once the newest
    // template has been fully rolled out; after that, a count change is scaling.
    let progressing_reason = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some("Progressing"))
        .and_then(|c| c.reason.as_deref());
    let new_template_pending = progressing_reason.is_some_and(|r| r != "NewReplicaSetAvailable")
        && (updated < desired || available < desired);
    if total > updated || new_template_pending {
        return Rollout::RollingOut {
            updated,
            desired,
            available,
            total,
        };
    }
    if total != desired || updated < desired || available < desired {
        return Rollout::Scaling { available, desired };
    }
    Rollout::Complete { available, desired }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(generation: i64, observed: i64, replicas: i32, status: serde_json::Value) -> Deployment {
        let mut s = status;
        s["observedGeneration"] = observed.into();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "m", "generation": generation},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": s,
        }))
        .expect("deployment")
    }

    #[test]
    fn missing_and_unobserved() {
        assert_eq!(rollout(None), Rollout::Missing);
        assert_eq!(
            rollout(Some((&dep(2, 1, 1, serde_json::json!({}))).into())),
            Rollout::NotObserved
        );
    }

    #[test]
    fn complete_when_every_pod_is_updated_and_available() {
        let d = dep(
            2,
            2,
            2,
            serde_json::json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "readyReplicas": 2}),
        );
        assert_eq!(
            rollout(Some((&d).into())),
            Rollout::Complete {
                available: 2,
                desired: 2
            }
        );
    }

    #[test]
    fn rolling_out_while_old_pods_remain() {
        let d = dep(
            3,
            3,
            2,
            serde_json::json!({"replicas": 2, "updatedReplicas": 1, "availableReplicas": 1}),
        );
        assert!(matches!(
            rollout(Some((&d).into())),
            Rollout::RollingOut {
                updated: 1,
                desired: 2,
                ..
            }
        ));
    }

    #[test]
    fn a_new_template_replacing_pods_one_by_one_is_a_rollout() {
        // maxSurge 0: the old pod is gone before the new one exists, so counts alone look like scaling.
        let d = dep(
            4,
            4,
            1,
            serde_json::json!({"replicas": 1, "updatedReplicas": 1, "availableReplicas": 0,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}),
        );
        assert!(matches!(
            rollout(Some((&d).into())),
            Rollout::RollingOut {
                updated: 1,
                desired: 1,
                available: 0,
                total: 1
            }
        ));
    }

    #[test]
    fn scaling_when_all_pods_are_current_but_not_enough() {
        let d = dep(
            3,
            3,
            4,
            serde_json::json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
        );
        assert_eq!(
            rollout(Some((&d).into())),
            Rollout::Scaling {
                available: 2,
                desired: 4
            }
        );
        let not_yet_available = dep(
            3,
            3,
            2,
            serde_json::json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}),
        );
        assert_eq!(
            rollout(Some((&not_yet_available).into())),
            Rollout::Scaling {
                available: 1,
                desired: 2
            }
        );
    }

    #[test]
    fn stuck_past_the_progress_deadline() {
        let d = dep(
            1,
            1,
            1,
            serde_json::json!({"replicas": 1, "conditions": [
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"m-1\" has timed out progressing."}]}),
        );
        assert_eq!(
            rollout(Some((&d).into())),
            Rollout::Stuck {
                message: "ReplicaSet \"m-1\" has timed out progressing.".into()
            }
        );
    }
}
