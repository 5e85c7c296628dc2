//! The Gateway API Inference Extension's `InferencePool`
//! (inference.networking.k8s.io/v1), as far as the operator writes it.
//!
//! As with HTTPRoute and KEDA, only the subset of the schema the operator
//! sets: no dependency on the extension's Go module or release. The e2e
//! suite applies it against the upstream v1.6.0 CRD in `../shared/k8s/crds/`,
//! whose structural schema rejects any field this gets wrong.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

/// The extension's GA group.
pub const GROUP: &str = "inference.networking.k8s.io";
/// The extension's experimental group: the objectives and rewrites users
/// attach to a pool, which the endpoint picker reads.
pub const EXPERIMENTAL_GROUP: &str = "inference.networking.x-k8s.io";
/// The version of InferencePool the operator writes (GA since the extension's v1.0).
pub const VERSION: &str = "v1";
/// The kind, as an HTTPRoute's backendRef names it.
pub const KIND: &str = "InferencePool";

/// An InferencePool: the model's pods behind an endpoint picker.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InferencePool {
    /// Always `inference.networking.k8s.io/v1`: a server-side apply body needs it.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always `InferencePool`.
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: InferencePoolSpec,
}

/// Which pods, on which port, and who picks among them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    pub selector: LabelSelector,
    pub target_ports: Vec<Port>,
    pub endpoint_picker_ref: EndpointPickerRef,
}

/// The pool's selector: labels only (the CRD allows no expressions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
}

/// A port number.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Port {
    pub number: i32,
}

/// The endpoint picker's Service. `group` and `kind` are left out: the
/// CRD's defaults ("" and Service) are what is meant, and a server-side apply
/// would otherwise fight the defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerRef {
    pub name: String,
    pub port: Port,
    /// What the gateway does when the picker does not answer: FailClose
    /// (refuse the request) or FailOpen (pick an endpoint itself).
    pub failure_mode: String,
}

impl InferencePool {
    /// An InferencePool with apiVersion and kind set.
    pub fn new(metadata: ObjectMeta, spec: InferencePoolSpec) -> Self {
        Self {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: KIND.into(),
            metadata,
            spec,
        }
    }
}

impl Resource for InferencePool {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "inferencepools".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
