//! Gateway API's `HTTPRoute` (gateway.networking.k8s.io/v1), as far as the
//! operator writes it.
//!
//! As with KEDA, the operator carries only the subset of the schema it sets,
//! so it depends on no Gateway API crate or release; the e2e suite applies it
//! against the upstream CRD in `../shared/k8s/crds/`, whose structural schema
//! rejects any field this gets wrong.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

use super::ParentReference;

/// Gateway API's group.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// The version of HTTPRoute the operator writes (GA since Gateway API 1.0).
pub const VERSION: &str = "v1";

/// A Gateway API HTTPRoute.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpRoute {
    /// Always `gateway.networking.k8s.io/v1`: a server-side apply body needs it.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always `HTTPRoute`.
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: HttpRouteSpec,
}

/// Where the route attaches, which hosts it answers, and where it sends.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    pub parent_refs: Vec<ParentReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    pub rules: Vec<HttpRouteRule>,
}

/// One rule: requests that match, and the weighted backends they go to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    pub matches: Vec<HttpRouteMatch>,
    pub backend_refs: Vec<BackendRef>,
}

/// A request match: a path prefix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpRouteMatch {
    pub path: PathMatch,
}

/// A path match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathMatch {
    #[serde(rename = "type")]
    pub type_: String,
    pub value: String,
}

/// A backend in the route's namespace, with its share of the traffic. For a
/// Service `group` and `kind` are left out: the API's defaults ("" and
/// Service) are what is meant, and a server-side apply would otherwise fight
/// the defaults. An InferencePool names its group and kind, and no port (the
/// pool has its own target ports).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    pub weight: i32,
}

impl HttpRoute {
    /// An HTTPRoute with apiVersion and kind set.
    pub fn new(metadata: ObjectMeta, spec: HttpRouteSpec) -> Self {
        Self {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: "HTTPRoute".into(),
            metadata,
            spec,
        }
    }
}

impl Resource for HttpRoute {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "HTTPRoute".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "httproutes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
