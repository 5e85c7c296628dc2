//! `serving.modelservice.dev/v1`: the stable version, which the API server
//! stores and the operator reconciles.
//!
//! Its shape is v1beta1's, grouped by concern, with one fix: the KEDA-only
//! knobs live in `autoscaling.keda` (see `docs/upgrading.md`). Every field of
//! the older versions has a home here (see `core::convert`, where v1 is the
//! hub); fields an older version lacks survive a trip through it in an
//! annotation.
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

use super::defaults::{
    default_canary_replicas, default_canary_weight, default_gpu_resource, default_gpus,
    default_metric, default_min_replicas, default_pipeline, default_port, default_replicas,
    default_route_path, default_target_queue_length,
};
use super::status::ModelServiceStatus;

/// A model served over HTTP on GPUs: the operator turns it into a Deployment,
/// a Service and, with `autoscaling`, a HorizontalPodAutoscaler.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "serving.modelservice.dev",
    version = "v1",
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
        json_path = ".spec.model.name",
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
        name = "Canary",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"CanaryHealthy\")].reason",
        description = "With rollout.canary: Serving, Starting, or why it was rolled back (for example CrashLooping)"
    ),
    printcolumn(
        name = "Weights",
        type_ = "string",
        json_path = ".status.model.progress",
        description = "With model.source: the download's progress (42% of 86.0 GiB, 410.0 MiB/s, about 2 min left), or the cached size once complete"
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
    pub route: Option<Box<Route>>,

    /// Scale the replica count on the serving runtime's request queue. When set, a HorizontalPodAutoscaler owns the replica count and spec.replicas is ignored; when removed, the HPA is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Box<Autoscaling>>,

    /// How one replica spreads over GPUs and nodes, for a model bigger than one node. With pipeline above 1, each replica is a group of that many pods on as many nodes (a LeaderWorkerSet named after the ModelService instead of a Deployment), and the preset launches the runtime's multi-node mode. Without it, or with pipeline 1, each replica is one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<Parallelism>,
}

/// Tensor parallelism within a pod, pipeline parallelism across pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Parallelism {
    /// GPUs per pod, which the runtime splits each layer over (vLLM's --tensor-parallel-size). It is resources.gpus: when set, it must be equal to it. SGLang's --tp is tensor x pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub tensor: Option<i32>,

    /// Pods per replica, each on its own node, which the runtime splits the layers over (vLLM's --pipeline-parallel-size, SGLang's --nnodes). 1 (the default) is one pod per replica in a Deployment; more makes a LeaderWorkerSet whose groups have this many pods, each with resources.gpus GPUs.
    #[serde(default = "default_pipeline")]
    #[schemars(range(min = 1, max = 16))]
    pub pipeline: i32,
}

/// The model and its revision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Model {
    /// The model to serve, as the serving runtime names it (for example a Hugging Face repository id such as meta-llama/Llama-3.1-8B-Instruct). The preset passes it to the server (for vllm as --model), and presets set it as MODEL_NAME.
    #[schemars(length(min = 1, max = crate::api::bounds::MODEL_NAME))]
    pub name: String,

    /// An optional revision of the model (a date, tag or commit). Shown as the modelservice.dev/model-version label on the pods; changing it rolls the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::VERSION))]
    pub version: Option<String>,

    /// Where the weights come from. Without it the server fetches model.name itself, in every pod, on every start. With a downloaded source (hf://, http(s)://) a Job fetches it once into the claim that cache describes, and every pod mounts that claim read-only; with pvc:// the pods mount the claim you name. The preset then points the server at the files and keeps model.name as the served name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<ModelSource>>,

    /// The volume a downloaded source is kept in: a PersistentVolumeClaim <name>-weights that every replica, restart and rollout of this ModelService reads. Required with an hf:// or http(s):// source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<Box<ModelCache>>,
}

/// A pinned source of model weights.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSource {
    /// hf://org/name@revision (a Hugging Face repository at a commit or tag), s3://bucket/prefix (every object under a prefix, one prefix per revision; S3 or an S3-compatible store), http(s)://host/path/file#sha256=<64 hex> (one file and its digest), or pvc://claim/path (a directory in an existing claim of this namespace, mounted as it is; nothing is downloaded). Changing it downloads the new source beside the old one, which keeps serving until the download is complete; then the pods roll.
    #[schemars(length(min = 1, max = crate::core::model_source::MAX_URI), regex(pattern = r"^(hf|s3|https?|pvc)://"))]
    pub uri: String,

    /// A Secret of this namespace whose keys become the download Job's environment (never the serving pods'): HF_TOKEN for hf://; AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL for an S3-compatible store) for s3://; BEARER_TOKEN for http(s)://.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: Option<String>,
}

/// The claim a downloaded source is kept in.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCache {
    /// The claim's size, for example 200Gi: the model, and the next revision while it downloads beside it. A download that does not fit says so (reason WeightsVolumeTooSmall) and names both sizes; raising it expands the claim when its storage class allows.
    pub size: Quantity,

    /// The claim's storage class; default the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,

    /// ReadWriteOnce (the default) works with every storage class, but all pods must then run on one node; ReadWriteMany (NFS, CephFS, a cloud file store) lets replicas on many nodes share one download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_mode: Option<CacheAccessMode>,
}

/// How the cache claim may be attached.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CacheAccessMode {
    /// One node at a time.
    #[default]
    ReadWriteOnce,
    /// Many nodes at once.
    ReadWriteMany,
}

/// The serving runtime.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Runtime {
    /// The container image of the serving runtime, for example vllm/vllm-openai:v0.8.5.
    #[schemars(length(min = 1, max = crate::api::bounds::IMAGE))]
    pub image: String,

    /// How model.name and runtime.port reach the server. vllm: --model NAME --port PORT; sglang: --model-path NAME --port PORT --host 0.0.0.0 (no --host when args set one: SGLang listens on 127.0.0.1 by default); tgi: --model-id NAME --port PORT; none: no arguments. Each preset also sets the env vars MODEL_NAME and PORT. When omitted, the vllm arguments are passed without those env vars, exactly as v1alpha1 does, so that objects written in v1alpha1 keep their pods unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,

    /// Extra arguments for the serving runtime, appended after the preset's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::api::bounds::ARGS), inner(length(max = crate::api::bounds::ARG)))]
    pub args: Vec<String>,

    /// Environment variables for the server container, in the core/v1 EnvVar shape. They come after the preset's MODEL_NAME and PORT, and may not repeat those names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::api::bounds::ENV))]
    pub env: Vec<EnvVar>,

    /// The TCP port the serving runtime listens on; also the Service port.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// How the model name and port are passed to a known serving runtime.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// vLLM: --model NAME --port PORT.
    Vllm,
    /// SGLang: --model-path NAME --port PORT --host 0.0.0.0 (SGLang listens on
    /// 127.0.0.1 by default, out of reach of probes and the Service); no
    /// --host when runtime.args set one.
    Sglang,
    /// Hugging Face Text Generation Inference: --model-id NAME --port PORT.
    Tgi,
    /// No arguments: the image reads MODEL_NAME and PORT, or args say everything.
    None,
}

/// What one replica needs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// GPUs per replica. 0 runs the model on CPU only (no GPU limit is set).
    #[serde(default = "default_gpus")]
    #[schemars(range(min = 0, max = 16))]
    pub gpus: i32,

    /// The extended resource name that GPUs are requested under, for example nvidia.com/gpu or amd.com/gpu.
    #[serde(default = "default_gpu_resource")]
    #[schemars(length(min = 1, max = crate::api::bounds::RESOURCE_NAME))]
    pub gpu_resource: String,

    /// CPU request, for example "4" or "500m".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,

    /// Memory request and limit, for example 32Gi. It is also the limit, so a model that outgrows it is restarted rather than starving its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            gpus: default_gpus(),
            gpu_resource: default_gpu_resource(),
            cpu: None,
            memory: None,
        }
    }
}

/// Where the pods may run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scheduling {
    /// Node labels the pods must match, for example a GPU model label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations for the pods, in the core/v1 Toleration shape (GPU nodes are often tainted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::api::bounds::TOLERATIONS))]
    pub tolerations: Vec<Toleration>,
}

impl Scheduling {
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.tolerations.is_empty()
    }
}

/// How pods are replaced when the spec changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// RollingUpdate replaces one pod at a time; Recreate stops all pods first.
    #[serde(default)]
    pub strategy: RolloutStrategy,

    /// With RollingUpdate: Auto (the default) surges when the cluster has room for one more replica as the rollout starts (maxSurge 1, maxUnavailable 0: no downtime), and replaces otherwise (maxSurge 0, maxUnavailable 1). The choice is made once per pod template and stated in the Progressing condition. Never always replaces. Objects written in v1alpha1 read as Never, which is what v1alpha1 does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge: Option<Surge>,

    /// A second version beside the stable one: a Deployment <name>-canary with these overrides, which the Service <name> also selects. Removing it removes the canary (a manual rollback); promotion is moving its overrides into the spec and removing it. A canary that crash-loops, cannot pull its image or misses its progress deadline is rolled back by the operator (0 replicas, weight 0) until its spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Box<Canary>>,
}

/// Whether a rolling update may run one pod above the replica count.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Surge {
    /// Surge when a node has the GPUs for one more replica as the rollout starts; replace otherwise.
    #[default]
    Auto,
    /// Always replace: never more pods than replicas.
    Never,
}

/// The canary track: any subset of these overrides the stable spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// The canary's model revision (model.version for the canary pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<CanaryModel>,
    /// The canary's image, arguments and environment; each one given replaces the stable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<CanaryRuntime>,
    /// Canary pods. Default 1.
    #[serde(default = "default_canary_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: i32,
    /// Percent of the route's traffic for the canary while both tracks have ready pods; the stable track gets the rest. Only with route. Default 10.
    #[serde(default = "default_canary_weight")]
    #[schemars(range(min = 0, max = 100))]
    pub weight: i32,
}

/// The canary's model revision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryModel {
    /// The revision the canary serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::VERSION))]
    pub version: Option<String>,
}

/// The canary's runtime overrides.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryRuntime {
    /// The canary's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = crate::api::bounds::IMAGE))]
    pub image: Option<String>,
    /// The canary's extra arguments, replacing runtime.args.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::ARGS), inner(length(max = crate::api::bounds::ARG)))]
    pub args: Option<Vec<String>>,
    /// The canary's environment, replacing runtime.env.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::ENV))]
    pub env: Option<Vec<EnvVar>>,
}

/// Exposure through a Gateway API HTTPRoute.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new("!has(self.inferencePool) || (has(self.backend) && self.backend == 'InferencePool')").message("route.inferencePool is only used with route.backend InferencePool").field_path(".inferencePool"))]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// The Gateways (or their listeners) the route attaches to.
    #[schemars(length(min = 1, max = 32))]
    pub parent_refs: Vec<ParentReference>,
    /// Host names the route answers for; none means every host of the Gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = crate::api::bounds::DNS_NAME)))]
    pub hostnames: Vec<String>,
    /// The path prefix routed to the model. Default /.
    #[serde(default = "default_route_path")]
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^/"))]
    pub path: String,
    /// What the route sends requests to. Service (the default): the model's Service, round-robin over its pods. InferencePool: an InferencePool <name> (inference.networking.k8s.io/v1) with an endpoint picker <name>-epp, which sends each request to the pod whose queue, KV cache and loaded LoRA adapters suit it best; the Gateway must support the Gateway API Inference Extension. With rollout.canary, each track gets its own pool and the route weighs the two pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<RouteBackend>,
    /// With backend InferencePool: how the Gateway treats the endpoint picker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_pool: Option<InferencePoolOptions>,
}

/// What an HTTPRoute sends requests to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RouteBackend {
    /// The model's Service: every pod alike.
    #[default]
    Service,
    /// An InferencePool with an endpoint picker: each request to the pod best placed to serve it.
    InferencePool,
}

/// The InferencePool's endpoint picker, as the Gateway uses it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolOptions {
    /// What the Gateway does when the endpoint picker does not answer: FailClose (the default) refuses the request; FailOpen sends it to a pod of the Gateway's own choosing.
    #[serde(default)]
    pub failure_mode: FailureMode,
}

/// The InferencePool's failureMode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailureMode {
    /// Refuse the request while the endpoint picker does not answer.
    #[default]
    FailClose,
    /// Route the request anyway, without the endpoint picker's choice.
    FailOpen,
}

/// A Gateway (or one of its listeners), as Gateway API's parentRefs name it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// The Gateway's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its namespace; default the ModelService's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::DNS_LABEL))]
    pub namespace: Option<String>,
    /// The listener's name on that Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::DNS_NAME))]
    pub section_name: Option<String>,
    /// The listener's port on that Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// The parent's API group; default gateway.networking.k8s.io.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::DNS_NAME))]
    pub group: Option<String>,
    /// The parent's kind; default Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::api::bounds::DNS_LABEL))]
    pub kind: Option<String>,
}

/// How pods are replaced when the spec changes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutStrategy {
    /// Replace pods one at a time, never running more pods than replicas (maxSurge 0, maxUnavailable 1).
    #[default]
    RollingUpdate,
    /// Stop every pod before starting new ones; for models that cannot share a node's GPUs across versions.
    Recreate,
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
    /// KEDA only: where the trigger reads the metric, when to wake from zero and how fast to scale down. Ignored with engine HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keda: Option<KedaOptions>,
}

/// The knobs only a KEDA ScaledObject has. In v1beta1 they sat beside the
/// HPA's bounds, where nothing said they meant nothing to an HPA.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KedaOptions {
    /// The Prometheus server the trigger queries. Default: the operator's --prometheus-address (chart value keda.prometheusAddress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusSource>,
    /// The summed queue above which a model scaled to zero wakes up (KEDA's activationThreshold). Default 0: the first waiting request wakes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub activation_queue_length: Option<i32>,
    /// Seconds without waiting requests before scaling to zero (KEDA's cooldownPeriod). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cooldown_seconds: Option<i32>,
    /// Seconds between two reads of the query (KEDA's pollingInterval). Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub polling_seconds: Option<i32>,
}

/// The autoscaler that owns the replica count.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Engine {
    /// A HorizontalPodAutoscaler (autoscaling/v2) on a per-pod custom metric.
    #[default]
    #[serde(rename = "HPA")]
    Hpa,
    /// A KEDA ScaledObject (keda.sh/v1alpha1) with a Prometheus trigger; allows minReplicas 0.
    #[serde(rename = "KEDA")]
    Keda,
}

/// Where KEDA reads the metric.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSource {
    /// The Prometheus server's URL, for example http://prometheus.monitoring:9090.
    #[schemars(length(min = 1, max = crate::api::bounds::URL))]
    pub address: String,
}

impl Rollout {
    /// The surge policy in effect (Auto when unset).
    pub fn surge(&self) -> Surge {
        self.surge.unwrap_or_default()
    }
}

impl Route {
    /// The backend in effect (Service when unset).
    pub fn backend(&self) -> RouteBackend {
        self.backend.unwrap_or_default()
    }

    /// The pool's failure mode in effect (FailClose when unset).
    pub fn failure_mode(&self) -> FailureMode {
        self.inference_pool
            .as_ref()
            .map(|p| p.failure_mode)
            .unwrap_or_default()
    }
}

impl Autoscaling {
    /// The engine in effect (HPA when unset).
    pub fn engine(&self) -> Engine {
        self.engine.unwrap_or_default()
    }

    /// The KEDA knobs, each unset when the spec has no `keda`.
    pub fn keda(&self) -> KedaOptions {
        self.keda.clone().unwrap_or_default()
    }
}

impl ModelServiceSpec {
    /// Pods per replica: 1 unless `parallelism.pipeline` says more.
    pub fn pipeline(&self) -> i32 {
        self.parallelism.as_ref().map_or(1, |p| p.pipeline)
    }
}
