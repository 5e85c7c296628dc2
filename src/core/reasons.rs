//! The machine-readable `reason` values of our conditions.
//!
//! They are part of the API: dashboards, Argo CD health checks and alerts match
//! on them, so they are CamelCase constants, never formatted strings.

/// Ready=True: every pod of the current spec is available.
pub const AVAILABLE: &str = "Available";
/// A new spec (or the first one) is being rolled out.
pub const ROLLING_OUT: &str = "RollingOut";
/// The pods already run the current spec; their count is changing.
pub const SCALING: &str = "Scaling";
/// The Deployment made no progress within its progress deadline.
pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
/// Progressing=False: nothing left to roll out.
pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
/// Degraded=False: nothing needs a human.
pub const AS_EXPECTED: &str = "AsExpected";
/// Pods cannot be scheduled because no node has enough free GPUs.
pub const INSUFFICIENT_GPU: &str = "InsufficientGPU";
/// Pods cannot be scheduled for any other reason.
pub const UNSCHEDULABLE: &str = "Unschedulable";
/// The serving image cannot be pulled.
pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";
/// The server container keeps restarting.
pub const CRASH_LOOPING: &str = "CrashLooping";
/// The spec has a problem the schema could not catch.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// The object could not even be read as a ModelService (stored before a schema change).
pub const INVALID_OBJECT: &str = "InvalidObject";
/// Writing a child failed; the message carries the API server's answer.
pub const RECONCILE_FAILED: &str = "ReconcileFailed";
/// A child's name is held by an object this ModelService does not control
/// (see `core::ownership`); nothing is written to it.
pub const CHILD_CONFLICT: &str = "ChildConflict";
/// Ready=True at zero replicas: KEDA scaled the model to zero while idle.
pub const SCALED_TO_ZERO: &str = "ScaledToZero";
/// Degraded: the autoscaler the spec asks for is not installed in the cluster.
pub const AUTOSCALER_UNAVAILABLE: &str = "AutoscalerUnavailable";
/// Degraded: the autoscaler is installed but says it cannot scale (a failing trigger).
pub const AUTOSCALER_NOT_READY: &str = "AutoscalerNotReady";
/// Degraded: the spec asks for a route, and the cluster has no Gateway API.
pub const ROUTE_UNAVAILABLE: &str = "RouteUnavailable";
/// Ready=False, Degraded: the spec asks for groups of pods
/// (`parallelism.pipeline` above 1), and the cluster has no LeaderWorkerSet.
pub const MULTI_NODE_UNAVAILABLE: &str = "MultiNodeUnavailable";
/// Degraded: a group of pods keeps being recreated (a member keeps failing).
pub const GROUP_RECREATING: &str = "GroupRecreating";
/// Ready=False: the weights of `model.source` are being downloaded into
/// the cache (status.model has the progress); the pods start, or roll,
/// once it is complete.
pub const DOWNLOADING_WEIGHTS: &str = "DownloadingWeights";
/// Ready=False, Degraded: the cache claim cannot hold the model.
pub const WEIGHTS_VOLUME_TOO_SMALL: &str = "WeightsVolumeTooSmall";
/// Ready=False, Degraded: the download failed for another reason (the
/// source refused it, a checksum never matched, retries ran out).
pub const WEIGHTS_DOWNLOAD_FAILED: &str = "WeightsDownloadFailed";
/// CanaryHealthy=True: every canary pod is ready.
pub const SERVING: &str = "Serving";
/// CanaryHealthy=True: canary pods are still starting.
pub const STARTING: &str = "Starting";
