//! The table of resource types the fake serves.
//!
//! A real API server only serves what is registered (built-in types) or what a
//! CRD declares; anything else is a 404. Keeping an explicit table lets tests
//! simulate "CRD not installed" by removing an entry, and lets the handlers
//! know per type whether status/scale subresources exist, which decides how
//! writes and `metadata.generation` behave.

use std::sync::Arc;

use serde_json::Value;

/// A custom resource's conversion, as its CRD's conversion webhook does it:
/// takes an object and the desired `apiVersion` (e.g.
/// `serving.modelservice.dev/v1alpha1`) and returns the object in that
/// version, or the message a failing webhook answers with. It is called
/// with the store locked, so it must not call the server.
pub type Converter = Arc<dyn Fn(Value, &str) -> Result<Value, String> + Send + Sync>;

/// Wraps the hook so that [`ResourceInfo`] stays `Debug`.
#[derive(Clone)]
struct Hook(Converter);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Converter")
    }
}

/// Closures cannot be compared; the same hook is the same `Arc`, which is
/// what tells a re-applied CRD (hook carried over) from a changed type.
impl PartialEq for Hook {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Where the `/scale` subresource reads and writes its numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// Dotted path of the desired replica count, e.g. `spec.replicas`.
    pub spec_replicas: String,
    /// Dotted path of the observed replica count, e.g. `status.replicas`.
    pub status_replicas: String,
    /// How `Scale.status.selector` is produced.
    pub selector: SelectorSource,
}

/// Source of the label selector string reported by `/scale`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorSource {
    /// A string at this dotted path (a CRD's `labelSelectorPath`).
    Path(String),
    /// Built-in workloads: format `spec.selector` (a `LabelSelector`).
    SpecSelector,
    /// No selector is reported.
    None,
}

/// Which object names the real server accepts for a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most types).
    Subdomain,
    /// RFC 1123 label (namespaces).
    Label,
    /// RFC 1035 label (services: names become DNS labels).
    Dns1035,
    /// Anything goes (events use arbitrary generated names).
    Any,
}

/// Everything the fake needs to know about one resource type.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceInfo {
    /// API group, `""` for the core group.
    pub group: String,
    /// Served versions. Several only for a custom resource whose CRD serves
    /// more than one; they share the objects, which are kept at
    /// `storage_version` and converted for every other version.
    pub versions: Vec<String>,
    /// The version objects are stored in (the CRD version with `storage: true`).
    pub storage_version: String,
    /// Lower-case plural used in URLs.
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Has a `/status` subresource: main-endpoint writes ignore `.status`.
    pub status_subresource: bool,
    pub scale: Option<ScalePaths>,
    /// Maintains `metadata.generation`.
    pub generation: bool,
    /// Served from a CRD: no strategic merge patch, DELETE returns the object.
    pub custom: bool,
    pub name_rule: NameRule,
    /// Extra `fieldSelector` fields beyond metadata.name/metadata.namespace.
    pub field_selectors: Vec<String>,
    /// `None`: conversion only rewrites `apiVersion`, as for a CRD with
    /// `conversion.strategy: None`.
    converter: Option<Hook>,
}

impl ResourceInfo {
    /// A namespaced type with no subresources; refine with the `with_*` methods.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str) -> Self {
        ResourceInfo {
            group: group.to_string(),
            versions: vec![version.to_string()],
            storage_version: version.to_string(),
            plural: plural.to_string(),
            kind: kind.to_string(),
            namespaced: true,
            status_subresource: false,
            scale: None,
            generation: false,
            custom: false,
            name_rule: NameRule::Subdomain,
            field_selectors: Vec::new(),
            converter: None,
        }
    }

    /// A custom resource as a CRD would declare it (generation tracking on).
    pub fn custom(group: &str, version: &str, plural: &str, kind: &str) -> Self {
        ResourceInfo {
            custom: true,
            generation: true,
            ..Self::new(group, version, plural, kind)
        }
    }

    pub fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    pub fn with_scale(mut self, scale: ScalePaths) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Serves `served` (in the CRD's order), storing objects in `storage`
    /// (which, as in a CRD, need not be served).
    pub fn with_versions(mut self, served: &[&str], storage: &str) -> Self {
        self.versions = served.iter().map(|v| v.to_string()).collect();
        self.storage_version = storage.to_string();
        self
    }

    /// Converts between versions with `hook`, like a CRD with a conversion
    /// webhook.
    pub fn with_converter(mut self, hook: Converter) -> Self {
        self.converter = Some(Hook(hook));
        self
    }

    /// Back to conversion that only rewrites `apiVersion`.
    pub fn without_converter(mut self) -> Self {
        self.converter = None;
        self
    }

    pub fn converter(&self) -> Option<&Converter> {
        self.converter.as_ref().map(|h| &h.0)
    }

    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// Whether objects can be converted to `api_version`: a served version
    /// or the storage version, as the CRD's conversion accepts any version
    /// the CRD declares.
    pub fn converts_to(&self, api_version: &str) -> bool {
        self.versions
            .iter()
            .chain(std::iter::once(&self.storage_version))
            .any(|v| self.api_version_at(v) == api_version)
    }

    /// The served versions, highest priority first: the order in which
    /// discovery lists them (the first is the preferred version).
    pub fn versions_by_priority(&self) -> Vec<String> {
        let mut v = self.versions.clone();
        sort_by_priority(&mut v);
        v
    }

    pub fn with_generation(mut self) -> Self {
        self.generation = true;
        self
    }

    fn with_name_rule(mut self, rule: NameRule) -> Self {
        self.name_rule = rule;
        self
    }

    fn with_field_selectors(mut self, fields: &[&str]) -> Self {
        self.field_selectors = fields.iter().map(|f| f.to_string()).collect();
        self
    }

    /// `v1` or `group/version` of the storage version, as written in stored
    /// objects' `apiVersion`.
    pub fn api_version(&self) -> String {
        self.api_version_at(&self.storage_version)
    }

    /// `apiVersion` of `version` of this type.
    pub fn api_version_at(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// `plural` or `plural.group`: how the real server names the type in messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Kind` or `Kind.group`: how validation errors name the type.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// The key the store files this type under.
    pub fn key(&self) -> ResKey {
        ResKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// Whether a DELETE that removes the object at once answers with the
    /// object (pods, services, namespaces) or with a `Status` of kind Success
    /// (the other built-ins, and custom resources: a real 1.32 apiserver
    /// answers a ModelService's delete with a Status).
    pub fn returns_deleted_object(&self) -> bool {
        self.group.is_empty() && matches!(self.plural.as_str(), "pods" | "services" | "namespaces")
    }

    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }
}

/// Identity of a resource type inside the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResKey {
    pub group: String,
    pub plural: String,
}

impl ResKey {
    pub fn new(group: &str, plural: &str) -> Self {
        ResKey {
            group: group.to_string(),
            plural: plural.to_string(),
        }
    }
}

/// Orders versions as the API server's discovery does (Kubernetes-aware:
/// GA before beta before alpha, higher numbers first, anything not shaped
/// like `v1beta2` last, alphabetically), which is how a CRD's preferred
/// version is chosen, whatever the order of its version list.
pub fn sort_by_priority(versions: &mut [String]) {
    versions.sort_by(|a, b| match (kube_version(a), kube_version(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    });
}

/// `(stability, major, minor)` of `v2`, `v1beta1`, `v1alpha3`; stability
/// 2 = GA, 1 = beta, 0 = alpha; a bigger tuple has the higher priority.
fn kube_version(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u64 = rest[..digits].parse().ok()?;
    let tail = &rest[digits..];
    let (stability, minor) = if tail.is_empty() {
        (2, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (1, n.parse().ok()?)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n.parse().ok()?)
    } else {
        return None;
    };
    Some((stability, major, minor))
}

/// The ModelService CRD: `v1` is the storage version, `v1beta1` and
/// `v1alpha1` are still served.
pub fn model_service() -> ResourceInfo {
    ResourceInfo::custom(
        "serving.modelservice.dev",
        "v1",
        "modelservices",
        "ModelService",
    )
    .with_versions(&["v1", "v1beta1", "v1alpha1"], "v1")
    .with_status()
    .with_scale(ScalePaths {
        spec_replicas: "spec.replicas".into(),
        status_replicas: "status.replicas".into(),
        selector: SelectorSource::Path("status.selector".into()),
    })
}

/// The types a fresh fake serves: what the operator and its tests touch.
pub fn default_resources() -> Vec<ResourceInfo> {
    let workload_scale = ScalePaths {
        spec_replicas: "spec.replicas".into(),
        status_replicas: "status.replicas".into(),
        selector: SelectorSource::SpecSelector,
    };
    vec![
        model_service(),
        ResourceInfo::new("apps", "v1", "deployments", "Deployment")
            .with_status()
            .with_scale(workload_scale.clone())
            .with_generation(),
        ResourceInfo::new("apps", "v1", "replicasets", "ReplicaSet")
            .with_status()
            .with_scale(workload_scale)
            .with_generation(),
        ResourceInfo::new("", "v1", "services", "Service")
            .with_status()
            .with_name_rule(NameRule::Dns1035),
        ResourceInfo::new("", "v1", "pods", "Pod")
            .with_status()
            .with_field_selectors(&[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.podIP",
            ]),
        ResourceInfo::new("", "v1", "configmaps", "ConfigMap"),
        // The weights cache and its download (no Job controller: tests play it).
        ResourceInfo::new("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
            .with_status(),
        ResourceInfo::new("batch", "v1", "jobs", "Job")
            .with_status()
            .with_generation(),
        ResourceInfo::new("", "v1", "secrets", "Secret").with_field_selectors(&["type"]),
        ResourceInfo::new("", "v1", "serviceaccounts", "ServiceAccount"),
        ResourceInfo::new("", "v1", "events", "Event")
            .with_name_rule(NameRule::Any)
            .with_field_selectors(&[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ]),
        ResourceInfo::new("events.k8s.io", "v1", "events", "Event")
            .with_name_rule(NameRule::Any)
            .with_field_selectors(&[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "reason",
                "reportingController",
                "type",
            ]),
        ResourceInfo::new(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
        )
        .with_status()
        .with_generation(),
        ResourceInfo::new(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
        )
        .with_status()
        .with_generation(),
        ResourceInfo::new("coordination.k8s.io", "v1", "leases", "Lease"),
        // An InferencePool's endpoint picker reads through them.
        ResourceInfo::new("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        ResourceInfo::new(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
        ),
        // Cluster-scoped, written by the simulator (its nodes and their GPUs)
        // and read by the operator's surge decision.
        ResourceInfo::new("", "v1", "nodes", "Node")
            .cluster_scoped()
            .with_status()
            .with_field_selectors(&["spec.unschedulable"]),
        ResourceInfo::new("", "v1", "namespaces", "Namespace")
            .cluster_scoped()
            .with_status()
            .with_name_rule(NameRule::Label),
        ResourceInfo::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
        )
        .cluster_scoped()
        .with_status()
        .with_generation(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kube_discovery() {
        let mut v: Vec<String> = [
            "v1alpha1", "v1beta1", "v2", "foo", "v1", "v11beta2", "v10beta3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        sort_by_priority(&mut v);
        assert_eq!(
            v,
            [
                "v2", "v1", "v11beta2", "v10beta3", "v1beta1", "v1alpha1", "foo"
            ]
        );
        assert_eq!(model_service().versions_by_priority()[0], "v1");
    }
}
