//! What the operator observed, written only by the operator through `/status`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    pub autoscaler: Option<AutoscalerStatus>,
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
}
