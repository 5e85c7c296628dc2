//! `serving.modelservice.dev/v1beta1`: deprecated, still served so that
//! objects and Git repositories written against it keep working.
//!
//! Its spec is v1's but for `autoscaling`, whose KEDA knobs sat flat beside
//! the HPA's bounds; every other part is v1's own type. Borrowing them is
//! safe because v1 is the promise that those shapes stop moving, and the
//! committed CRD (`crds/`, checked in CI) shows any change to this version's
//! schema as a diff. A change to a borrowed type must first fork it here.
//! Its printer columns are v1's too, copied when the CRD is built.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults::{
    default_metric, default_min_replicas, default_replicas, default_target_queue_length,
};
use super::status::ModelServiceStatus;
use super::v1::{
    Engine, Model, Parallelism, PrometheusSource, Resources, Rollout, Route, Runtime, Scheduling,
};

/// A model served over HTTP on GPUs: the operator turns it into a Deployment,
/// a Service and, with `autoscaling`, a HorizontalPodAutoscaler.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "serving.modelservice.dev",
    version = "v1beta1",
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
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelServiceSpec {
    /// What is served.
    pub model: Model,

    /// The serving runtime: its image, how the model reaches it, and its port.
    pub runtime: Runtime,

    /// Number of serving pods when autoscaling is not set. Ignored while autoscaling is set: the autoscaler then owns the replica count.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: i32,

    /// GPUs, CPU and memory of each replica.
    #[serde(default)]
    pub resources: Resources,

    /// Where the pods may run.
    #[serde(default, skip_serializing_if = "Scheduling::is_empty")]
    pub scheduling: Scheduling,

    /// How a new spec replaces running pods.
    #[serde(default)]
    pub rollout: Rollout,

    /// Expose the model through a Gateway API HTTPRoute with the same name. With rollout.canary the route splits traffic between the stable and canary tracks by weight, and only to a track with ready pods. Without Gateway API in the cluster, status says so and nothing else changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Route>,

    /// Scale the replica count on the serving runtime's request queue. When set, a HorizontalPodAutoscaler owns the replica count and spec.replicas is ignored; when removed, the HPA is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,

    /// How one replica spreads over GPUs and nodes, for a model bigger than one node. With pipeline above 1, each replica is a group of that many pods on as many nodes (a LeaderWorkerSet named after the ModelService instead of a Deployment), and the preset launches the runtime's multi-node mode. Without it, or with pipeline 1, each replica is one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<Parallelism>,
}

/// Queue-length based autoscaling, by an HPA or by KEDA.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new("self.maxReplicas >= self.minReplicas").message("autoscaling.maxReplicas must be greater than or equal to autoscaling.minReplicas").field_path(".maxReplicas"))]
#[x_kube(validation = kube::core::Rule::new("self.minReplicas >= 1 || (has(self.engine) && self.engine == 'KEDA')").message("autoscaling.minReplicas may be 0 only with autoscaling.engine KEDA (scale to zero)").field_path(".minReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// What scales the Deployment: HPA (default; a HorizontalPodAutoscaler on a per-pod custom metric) or KEDA (a KEDA ScaledObject on a Prometheus query, which can scale to zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
    /// Fewest replicas the autoscaler keeps; 0 (scale to zero) only with engine KEDA.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 0, max = 100))]
    pub min_replicas: i32,
    /// Most replicas the autoscaler may create; must be at least minReplicas.
    #[schemars(range(min = 1, max = 100))]
    pub max_replicas: i32,
    /// Waiting requests one replica should carry: the autoscaler keeps replicas = ceil(total queue / targetQueueLength), within the bounds.
    #[serde(default = "default_target_queue_length")]
    #[schemars(range(min = 1))]
    pub target_queue_length: i32,
    /// The per-pod metric that measures the queue. HPA: served by a custom metrics adapter such as prometheus-adapter. KEDA: a Prometheus metric, summed over this ModelService's pods.
    #[serde(default = "default_metric")]
    #[schemars(length(min = 1, max = crate::api::bounds::METRIC))]
    pub metric: String,
    /// KEDA only: the Prometheus server the trigger queries. Default: the operator's --prometheus-address (chart value keda.prometheusAddress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusSource>,
    /// KEDA only: the summed queue above which a model scaled to zero wakes up (KEDA's activationThreshold). Default 0: the first waiting request wakes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub activation_queue_length: Option<i32>,
    /// KEDA only: seconds without waiting requests before scaling to zero (KEDA's cooldownPeriod). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cooldown_seconds: Option<i32>,
    /// KEDA only: seconds between two reads of the query (KEDA's pollingInterval). Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub polling_seconds: Option<i32>,
}
