//! LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), as far as the operator
//! writes and reads it.
//!
//! As with KEDA and the InferencePool, only the subset the operator sets,
//! with no dependency on the LWS Go module. The e2e suite applies it
//! against the upstream v0.10.0 CRD in `../shared/k8s/crds/`, whose
//! structural schema rejects any field this gets wrong.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "leaderworkerset.x-k8s.io";
pub const VERSION: &str = "v1";
pub const KIND: &str = "LeaderWorkerSet";

/// Labels and environment the LWS controller gives every pod of a group:
/// the names are LWS's API, which group readiness and diagnosis read.
pub mod labels {
    /// The LeaderWorkerSet's name.
    pub const NAME: &str = "leaderworkerset.sigs.k8s.io/name";
    /// Which group (replica) the pod belongs to: "0", "1", ...
    pub const GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
    /// The pod's place in its group: "0" is the leader.
    pub const WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
    /// The leader's address, as LWS sets it in every container.
    pub const LEADER_ADDRESS_ENV: &str = "LWS_LEADER_ADDRESS";
    /// The group's size, as LWS sets it in every container.
    pub const GROUP_SIZE_ENV: &str = "LWS_GROUP_SIZE";
    /// The pod's worker index, as LWS sets it in every container.
    pub const WORKER_INDEX_ENV: &str = "LWS_WORKER_INDEX";
}

/// A LeaderWorkerSet: `replicas` groups of `size` pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaderWorkerSet {
    /// Always `leaderworkerset.x-k8s.io/v1`: a server-side apply body needs it.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always `LeaderWorkerSet`.
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: LeaderWorkerSetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<LeaderWorkerSetStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// Left out while an autoscaler owns the count, as with a Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    pub leader_worker_template: LeaderWorkerTemplate,
    pub rollout_strategy: RolloutStrategy,
    pub startup_policy: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    pub size: i32,
    pub restart_policy: String,
    pub leader_template: PodTemplateSpec,
    pub worker_template: PodTemplateSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    #[serde(rename = "type")]
    pub type_: String,
    pub rolling_update_configuration: RollingUpdate,
}

/// Counted in groups, not pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    pub max_unavailable: IntOrString,
    pub max_surge: IntOrString,
}

/// What the LWS controller reports, in groups.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Groups whose every pod is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Groups that run the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa_pod_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl LeaderWorkerSet {
    /// A LeaderWorkerSet with apiVersion and kind set.
    pub fn new(metadata: ObjectMeta, spec: LeaderWorkerSetSpec) -> Self {
        Self {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: KIND.into(),
            metadata,
            spec,
            status: None,
        }
    }
}

impl Resource for LeaderWorkerSet {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "leaderworkersets".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
