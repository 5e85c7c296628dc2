//! KEDA's `ScaledObject` (keda.sh/v1alpha1), as far as the operator writes
//! and reads it.
//!
//! KEDA ships no Rust types, and the operator must not depend on KEDA's Go
//! module versions: this is the subset of its schema the operator sets,
//! checked against the CRD in `../shared/k8s/crds/` by the e2e suite (the
//! API server rejects unknown fields of a structural schema on apply).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

/// KEDA's API group.
pub const GROUP: &str = "keda.sh";
/// The version of ScaledObject the operator writes.
pub const VERSION: &str = "v1alpha1";

/// A KEDA ScaledObject.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScaledObject {
    /// Always `keda.sh/v1alpha1`: a server-side apply body needs it.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always `ScaledObject`.
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ScaledObjectSpec,
}

/// What KEDA scales, within which bounds, and on which trigger.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaledObjectSpec {
    pub scale_target_ref: ScaleTargetRef,
    pub min_replica_count: i32,
    pub max_replica_count: i32,
    /// Seconds between two reads of the trigger.
    pub polling_interval: i32,
    /// Seconds of an inactive trigger before scaling to minReplicaCount
    /// (only used when that is 0).
    pub cooldown_period: i32,
    pub triggers: Vec<Trigger>,
}

/// The workload KEDA scales.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

/// One scaler. KEDA's trigger metadata is a map of strings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    #[serde(rename = "type")]
    pub type_: String,
    /// Which of the Value and AverageValue targets KEDA gives the HPA it makes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

impl ScaledObject {
    /// An empty ScaledObject with apiVersion and kind set.
    pub fn new(metadata: ObjectMeta, spec: ScaledObjectSpec) -> Self {
        Self {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: "ScaledObject".into(),
            metadata,
            spec,
        }
    }
}

impl Resource for ScaledObject {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ScaledObject".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "scaledobjects".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
