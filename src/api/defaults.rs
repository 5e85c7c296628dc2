//! Defaults shared by both API versions: a field that exists in both must
//! default the same way in both, or a conversion would change its meaning.

/// The GPU extended resource requested when `gpuResource` is not set.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The port the serving runtime listens on when `port` is not set (vLLM's default).
pub const DEFAULT_PORT: i32 = 8000;
/// The per-pod metric the HPA scales on when `autoscaling.metric` is not set.
pub const DEFAULT_METRIC: &str = "vllm:num_requests_waiting";

pub(super) fn default_replicas() -> i32 {
    1
}
pub(super) fn default_pipeline() -> i32 {
    1
}
pub(super) fn default_port() -> i32 {
    DEFAULT_PORT
}
pub(super) fn default_gpus() -> i32 {
    1
}
pub(super) fn default_gpu_resource() -> String {
    DEFAULT_GPU_RESOURCE.to_string()
}
pub(super) fn default_min_replicas() -> i32 {
    1
}
pub(super) fn default_target_queue_length() -> i32 {
    5
}
pub(super) fn default_metric() -> String {
    DEFAULT_METRIC.to_string()
}
pub(super) fn default_canary_replicas() -> i32 {
    1
}
pub(super) fn default_canary_weight() -> i32 {
    10
}
pub(super) fn default_route_path() -> String {
    "/".to_string()
}
