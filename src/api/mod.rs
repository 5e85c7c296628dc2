//! The `ModelService` custom resource: the public contract users write against.
//!
//! The CRD installed in clusters is generated from these types and nothing else
//! (`modelservice-operator crd`), so every validation rule, default and
//! description lives here, next to the field it describes.
//!
//! Three versions are served. [`v1`] is stored and is what the operator
//! reconciles, so its types are re-exported here; [`v1beta1`] and
//! [`v1alpha1`] are deprecated and reach the operator only through
//! `core::convert`, where v1 is the hub.

pub mod bounds;
mod crd;
mod defaults;
pub mod gateway;
pub mod inference;
pub mod keda;
pub mod lws;
pub mod schema_check;
mod status;
pub mod v1;
pub mod v1alpha1;
pub mod v1beta1;

pub use crd::{
    CRD_FILE, CRD_NAME, GROUP, STORAGE_VERSION, WEBHOOK_PATH, crd, crd_yaml, deprecation_warning,
};
pub use defaults::{DEFAULT_GPU_RESOURCE, DEFAULT_METRIC, DEFAULT_PORT};
pub use status::{
    AutoscalerStatus, ModelServiceStatus, ModelWeightsStatus, PoolStatus, RouteParentStatus,
    RouteStatus, TrackStatus, TracksStatus, condition_types,
};
pub use v1::{
    Autoscaling, CacheAccessMode, Canary, CanaryModel, CanaryRuntime, Engine, FailureMode,
    InferencePoolOptions, KedaOptions, Model, ModelCache, ModelService, ModelServiceSpec,
    ModelSource, Parallelism, ParentReference, Preset, PrometheusSource, Resources, Rollout,
    RolloutStrategy, Route, RouteBackend, Runtime, Scheduling, Surge,
};
