//! `serving.modelservice.dev/v1alpha1`: the first, flat version of the spec.
//!
//! Still served (deprecated) so that objects and Git repositories written
//! against it keep working; it converts losslessly to and from v1
//! (`core::convert`), which is what the operator reconciles and stores.
//!
//! Integers are `i32`: schemars would emit `format: uint32` for unsigned
//! types, which the API server rejects in a structural schema.

// Several `printcolumn(...)` entries share `type_ = "string"`, which clippy
// mistakes for a repeated attribute.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::{EnvVar, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::status::ModelServiceStatus;
pub use super::v1::RolloutStrategy;

use super::defaults::{
    default_gpu_resource, default_gpus, default_metric, default_min_replicas, default_port,
    default_replicas, default_target_queue_length,
};

/// A model served over HTTP on GPUs: the operator turns it into a Deployment,
/// a Service and, with `autoscaling`, a HorizontalPodAutoscaler.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "serving.modelservice.dev",
    version = "v1alpha1",
    kind = "ModelService",
    plural = "modelservices",
    singular = "modelservice",
    shortname = "mlsvc",
    namespaced,
    status = "ModelServiceStatus",
    derive = "PartialEq",
    validation = kube::core::Rule::new(
        "size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    )
    .message("metadata.name must be a DNS-1035 label (at most 63 characters of lowercase letters, digits and '-', starting with a letter and ending with a letter or digit): the Service and the labels the operator creates are named after it"),
    doc = "ModelService runs one AI model behind an HTTP endpoint on GPU nodes. The operator creates a Deployment, a Service and optionally a HorizontalPodAutoscaler with the same name, and reports in status.conditions why the model is or is not serving.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Model",
        type_ = "string",
        json_path = ".spec.model",
        description = "The model being served"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the current spec is rolled out and available"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the model is or is not ready (for example InsufficientGPU, ImagePullFailed, RollingOut)"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Ready pods of the current Deployment"
    ),
    printcolumn(
        name = "URL",
        type_ = "string",
        json_path = ".status.url",
        priority = 1,
        description = "In-cluster URL of the model's HTTP endpoint"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelServiceSpec {
    /// The model to serve, as the serving runtime names it (for example a Hugging Face repository id such as meta-llama/Llama-3.1-8B-Instruct). Passed to the container as --model and MODEL_NAME.
    #[schemars(length(min = 1, max = crate::api::bounds::MODEL_NAME))]
    pub model: String,

    /// An optional revision of the model (a date, tag or commit). Shown as the modelservice.dev/model-version label on the pods; changing it rolls the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::VERSION))]
    pub model_version: Option<String>,

    /// The container image of the serving runtime, for example vllm/vllm-openai:v0.8.5.
    #[schemars(length(min = 1, max = crate::api::bounds::IMAGE))]
    pub image: String,

    /// Extra arguments for the serving runtime, appended after the operator's own (--model, --port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::api::bounds::ARGS), inner(length(max = crate::api::bounds::ARG)))]
    pub args: Vec<String>,

    /// Environment variables for the server container, in the core/v1 EnvVar shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::api::bounds::ENV))]
    pub env: Vec<EnvVar>,

    /// Number of serving pods when autoscaling is not set. Ignored while autoscaling is set: the HorizontalPodAutoscaler then owns the replica count.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: i32,

    /// The TCP port the serving runtime listens on; also the Service port.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// GPUs per replica. 0 runs the model on CPU only (no GPU limit is set).
    #[serde(default = "default_gpus")]
    #[schemars(range(min = 0, max = 16))]
    pub gpus: i32,

    /// The extended resource name that GPUs are requested under, for example nvidia.com/gpu or amd.com/gpu.
    #[serde(default = "default_gpu_resource")]
    #[schemars(length(min = 1, max = crate::api::bounds::RESOURCE_NAME))]
    pub gpu_resource: String,

    /// CPU and memory requests for each replica. Memory is also set as the limit, so a model that outgrows it is restarted rather than starving its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequests>,

    /// Node labels the pods must match, for example a GPU model label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations for the pods, in the core/v1 Toleration shape (GPU nodes are often tainted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::api::bounds::TOLERATIONS))]
    pub tolerations: Vec<Toleration>,

    /// How a new spec replaces running pods. RollingUpdate replaces one pod at a time without surge pods (a surge pod needs GPUs that are usually not free); Recreate stops all pods first.
    #[serde(default)]
    pub strategy: RolloutStrategy,

    /// Scale the replica count on the serving runtime's request queue. When set, a HorizontalPodAutoscaler owns the replica count and spec.replicas is ignored; when removed, the HPA is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
}

/// CPU and memory requests for one replica.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequests {
    /// CPU request, for example "4" or "500m".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory request and limit, for example 32Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

/// Queue-length based autoscaling.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new("self.maxReplicas >= self.minReplicas").message("autoscaling.maxReplicas must be greater than or equal to autoscaling.minReplicas").field_path(".maxReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Fewest replicas the autoscaler keeps.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub min_replicas: i32,
    /// Most replicas the autoscaler may create; must be at least minReplicas.
    #[schemars(range(min = 1, max = 100))]
    pub max_replicas: i32,
    /// Waiting requests one replica should carry: the HPA keeps replicas = ceil(total queue / targetQueueLength), within the bounds.
    #[serde(default = "default_target_queue_length")]
    #[schemars(range(min = 1))]
    pub target_queue_length: i32,
    /// The per-pod metric (served by a custom metrics adapter such as prometheus-adapter) that measures the queue.
    #[serde(default = "default_metric")]
    #[schemars(length(min = 1, max = crate::api::bounds::METRIC))]
    pub metric: String,
}
