//! What the operator observed, written only by the operator through `/status`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The parts that only some ModelServices have are boxed: a status is held
// once per ModelService in the cache and again while a write of it is
// remembered, and inline they made it 520 bytes for everyone. (A box is
// invisible to serde and to the schema; a doc comment here would not be.)
/// The observed state of a ModelService.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelServiceStatus {
    /// The metadata.generation the operator last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of the current Deployment (used by the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Pods of the current Deployment that are ready to serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Label selector of the pods, in string form (used by the scale subresource and kubectl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// In-cluster URL of the model's HTTP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The latest observations: Ready, Progressing and Degraded, each with the generation it describes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The autoscaler as it reports itself, with autoscaling.engine KEDA: whether KEDA's ScaledObject is Ready (its trigger works) and Active (scaling above zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<Box<AutoscalerStatus>>,
    /// The stable and canary tracks, while rollout.canary is set: pods, ready pods and the weight each gets on the route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracks: Option<TracksStatus>,
    /// The HTTPRoute, while route is set: whether Gateway API is installed and whether each Gateway accepted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Box<RouteStatus>>,
    /// The weights, while model.source is set: the download's progress, and what the pods read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Box<ModelWeightsStatus>>,
}

/// The model's weights as the cache holds them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelWeightsStatus {
    /// The source the spec asks for (model.source.uri).
    pub source: String,
    /// Pending (the Job or its volume is not running yet), Downloading, Complete or Failed; Mounted for a pvc:// source.
    pub phase: String,
    /// Bytes of this source in the cache, resumed downloads included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_bytes: Option<i64>,
    /// Bytes of the whole source, once the download has listed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<i64>,
    /// The download's rate over its last seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<i64>,
    /// Seconds left at that rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<i64>,
    /// All of the above for people, for example "42% of 86.0 GiB, 410.0 MiB/s, about 2 min left" (the Weights column of kubectl get).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Why the download failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The source the serving pods read now: the previous one while a new one downloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<String>,
}

/// Both tracks of a canary rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracksStatus {
    /// The stable Deployment <name>.
    pub stable: TrackStatus,
    /// The canary Deployment <name>-canary.
    pub canary: TrackStatus,
}

/// One track.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrackStatus {
    /// Its pods.
    pub replicas: i32,
    /// Its pods that are ready to serve.
    pub ready_replicas: i32,
    /// The percent of the route's traffic it gets now (set only with route): 0 while it has no ready pod or is rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// The HTTPRoute as its Gateways see it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// The HTTPRoute's name.
    pub name: String,
    /// True when every parent Gateway accepted the route; False when one refused it; unset until they report, or without Gateway API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<bool>,
    /// Why the route is not (yet) serving, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What each parent Gateway reported (the HTTPRoute's status.parents): its Accepted and ResolvedRefs conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<RouteParentStatus>,
    /// With route.backend InferencePool: each InferencePool the route sends to (one per track), whether its Gateways accepted it, and whether its endpoint picker is ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolStatus>,
}

/// One InferencePool and its endpoint picker.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// The InferencePool's name.
    pub name: String,
    /// True when every Gateway that reported on the pool accepted it and resolved its endpoint picker; False when one did not; unset until one reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<bool>,
    /// What each Gateway reported on the pool (the InferencePool's status.parents): its Accepted and ResolvedRefs conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<RouteParentStatus>,
    /// The endpoint picker's Deployment.
    pub endpoint_picker: String,
    /// Its ready pods: with none, a FailClose pool refuses every request through the Gateway.
    pub endpoint_picker_ready_replicas: i32,
}

/// One parent Gateway's view of the route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent, as namespace/name (and /section when set).
    pub parent: String,
    /// The status of its Accepted condition (True, False or Unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
    /// The reason of its Accepted condition, or of ResolvedRefs when that is False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What the autoscaler says of itself.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerStatus {
    /// The engine: KEDA.
    pub engine: String,
    /// The ScaledObject's Ready condition status (True, False or Unknown); unset until KEDA reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// The ScaledObject's Active condition status: True while the trigger asks for replicas above zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// KEDA's message on its Ready condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The condition types the operator maintains.
pub mod condition_types {
    /// True only when the current generation is fully rolled out and available.
    pub const READY: &str = "Ready";
    /// True while a rollout or scale of the current spec is under way.
    pub const PROGRESSING: &str = "Progressing";
    /// True when something needs a human (GPU shortage, image pull failure, invalid spec...).
    pub const DEGRADED: &str = "Degraded";
    /// With rollout.canary: False when the canary is rolled back (and why), True while it serves.
    pub const CANARY_HEALTHY: &str = "CanaryHealthy";
}
