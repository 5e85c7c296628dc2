//! The `ModelService` custom resource: the public contract users write against.
//!
//! The CRD installed in clusters is generated from these types and nothing else
//! (`modelservice-operator crd`), so every validation rule, default and
//! description lives here, next to the field it describes.

mod crd;
mod spec;
mod status;

pub use crd::{CRD_FILE, crd_yaml};
pub use spec::{
    Autoscaling, DEFAULT_GPU_RESOURCE, DEFAULT_METRIC, DEFAULT_PORT, ModelService,
    ModelServiceSpec, ResourceRequests, RolloutStrategy,
};
pub use status::{ModelServiceStatus, condition_types};
