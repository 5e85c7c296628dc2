//! Children as the operator reads them: metadata, the spec as raw JSON, and
//! the status only where something reads it.
//!
//! Why not the typed k8s-openapi objects: a Deployment with its server
//! defaults decodes into hundreds of small allocations (every `Option<String>`
//! of every container field), and `managedFields` decodes into a whole JSON
//! tree. The operator reads a child's metadata, compares the fields it sets
//! against the spec (a JSON comparison anyway, see `core::subset`), and reads
//! the Deployment's status. Decoding only that, from the watch streams and
//! from the apply responses, keeps both the cache's memory and the decoding
//! CPU small (BENCHMARKS.md has the figures).
//!
//! The spec is kept as text, which works when serde_json reads the object
//! straight from the wire: see `guarded` for why that holds for watches.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::apply::FIELD_MANAGER;
use crate::core::rollout::DeploymentState;

/// The annotation client-side `kubectl apply` keeps its last input in: a
/// copy of the whole object, never read by the operator, so never kept.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object of kind `K`: its metadata (without managedFields), its spec
/// verbatim, and its status decoded as `S` (by default skipped).
///
/// Labels and annotations are kept as JSON text too, beside the metadata: a
/// map costs a 544-byte B-tree node even for one entry, and the operator only
/// compares them. So `metadata.labels` and `metadata.annotations` are always
/// `None` here; read them with [`Lean::annotation`] or [`Lean::to_json`].
pub struct Lean<K, S = IgnoredAny> {
    pub metadata: ObjectMeta,
    /// Whether the operator's field manager owns `spec.replicas`, read from
    /// managedFields, the one thing kept of them: turning autoscaling on
    /// must hand that field over without a dip (see `apply::hand_over_replicas`).
    pub owns_replicas: bool,
    labels: Option<Box<RawValue>>,
    annotations: Option<Box<RawValue>>,
    pub spec: Option<Box<RawValue>>,
    /// What a kind without a spec carries instead (see [`BODY_FIELDS`]).
    body: Vec<(&'static str, Box<RawValue>)>,
    pub status: Option<S>,
    kind: PhantomData<fn() -> K>,
}

/// The top-level fields, besides metadata and spec, that the operator sets
/// on some child and so must compare: a ConfigMap's data, a Role's rules, a
/// RoleBinding's roleRef and subjects, a ServiceAccount's token mount.
const BODY_FIELDS: [&str; 5] = [
    "data",
    "rules",
    "roleRef",
    "subjects",
    "automountServiceAccountToken",
];

/// The object as it comes from the wire.
#[derive(Deserialize)]
#[serde(bound(deserialize = "S: DeserializeOwned"))]
struct Wire<S> {
    #[serde(default)]
    metadata: MetaWire,
    #[serde(default)]
    spec: Option<Box<RawValue>>,
    #[serde(default)]
    status: Option<S>,
    #[serde(default)]
    data: Option<Box<RawValue>>,
    #[serde(default)]
    rules: Option<Box<RawValue>>,
    #[serde(default, rename = "roleRef")]
    role_ref: Option<Box<RawValue>>,
    #[serde(default)]
    subjects: Option<Box<RawValue>>,
    #[serde(default, rename = "automountServiceAccountToken")]
    automount: Option<Box<RawValue>>,
}

impl<'de, K, S: DeserializeOwned> Deserialize<'de> for Lean<K, S> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::<S>::deserialize(d)?;
        let owns_replicas = w.metadata.managed_fields.as_ref().is_some_and(|m| m.0);
        let (metadata, labels, annotations) = w.metadata.split();
        let body = BODY_FIELDS
            .into_iter()
            .zip([w.data, w.rules, w.role_ref, w.subjects, w.automount])
            .filter_map(|(k, v)| Some((k, v?)))
            .collect();
        Ok(Self {
            metadata,
            owns_replicas,
            labels,
            annotations,
            spec: w.spec,
            body,
            status: w.status,
            kind: PhantomData,
        })
    }
}

/// The Deployment: its status says how the rollout is going.
pub type LeanDeployment = Lean<Deployment, RolloutStatus>;

/// A Deployment's status as `core::rollout` reads it: the counts, and of
/// the conditions only Progressing, with its reason, and its message only
/// when the rollout is stuck (that message is reported). The Available
/// condition, the other messages and the timestamps are dropped as the
/// status is read: the cache holds one status per Deployment for as long
/// as the Deployment lives, and at 10,000 of them every byte counts
/// (BENCHMARKS.md, "Issue 36, third round").
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolloutStatus(pub DeploymentStatus);

/// The one message of a Deployment's conditions that the operator reports.
const STUCK: &str = "ProgressDeadlineExceeded";

impl<'de> Deserialize<'de> for RolloutStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut st = DeploymentStatus::deserialize(d)?;
        st.collision_count = None;
        if let Some(conditions) = st.conditions.as_mut() {
            conditions.retain(|c| c.type_.as_deref() == Some("Progressing"));
            for c in conditions.iter_mut() {
                c.last_transition_time = None;
                c.last_update_time = None;
                if c.reason.as_deref() != Some(STUCK) {
                    c.message = None;
                }
            }
            conditions.shrink_to_fit();
        }
        Ok(Self(st))
    }
}

impl std::ops::Deref for RolloutStatus {
    type Target = DeploymentStatus;
    fn deref(&self) -> &DeploymentStatus {
        &self.0
    }
}
/// The Service: existence, ownership and our fields are all that matter.
pub type LeanService = Lean<Service>;
/// The HorizontalPodAutoscaler: the same.
pub type LeanHpa = Lean<HorizontalPodAutoscaler>;

impl<K, S: Clone> Clone for Lean<K, S> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            owns_replicas: self.owns_replicas,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            spec: self.spec.clone(),
            body: self.body.clone(),
            status: self.status.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource<DynamicType = ()>, S: std::fmt::Debug> std::fmt::Debug for Lean<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&K::kind(&()))
            .field("metadata", &self.metadata)
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .field("spec", &self.spec)
            .field("status", &self.status)
            .finish()
    }
}

impl<K: Resource<DynamicType = ()>, S> Resource for Lean<K, S> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K: Resource<DynamicType = ()>, S> Lean<K, S> {
    /// The object as JSON with the fields we can compare against what we
    /// apply: apiVersion, kind, metadata (labels and annotations included)
    /// and spec (status is never applied).
    pub fn to_json(&self) -> Result<Value, serde_json::Error> {
        let parse = |raw: &Option<Box<RawValue>>| match raw {
            Some(raw) => serde_json::from_str(raw.get()),
            None => Ok(Value::Null),
        };
        let mut metadata = serde_json::to_value(&self.metadata)?;
        if let Some(m) = metadata.as_object_mut() {
            for (key, raw) in [("labels", &self.labels), ("annotations", &self.annotations)] {
                let v = parse(raw)?;
                if !v.is_null() {
                    m.insert(key.into(), v);
                }
            }
        }
        let mut object = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": metadata,
            "spec": parse(&self.spec)?,
        });
        if let Some(o) = object.as_object_mut() {
            for (key, raw) in &self.body {
                o.insert((*key).to_string(), serde_json::from_str(raw.get())?);
            }
        }
        Ok(object)
    }

    /// `spec.replicas`, when set and readable.
    pub fn spec_replicas(&self) -> Option<i32> {
        #[derive(Deserialize)]
        struct Replicas {
            replicas: Option<i32>,
        }
        let raw = self.spec.as_deref()?;
        serde_json::from_str::<Replicas>(raw.get()).ok()?.replicas
    }

    /// The spec as JSON, when there is one and it reads.
    pub fn spec_value(&self) -> Option<Value> {
        serde_json::from_str(self.spec.as_deref()?.get()).ok()
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<String> {
        let raw = self.annotations.as_deref()?;
        let mut map: BTreeMap<String, String> = serde_json::from_str(raw.get()).ok()?;
        map.remove(key)
    }

    /// The object we are about to apply, as it will read back before any
    /// controller has acted on it: no status.
    pub fn from_desired(desired: &Value) -> Result<Self, serde_json::Error> {
        let (metadata, labels, annotations) = MetaWire::deserialize(&desired["metadata"])?.split();
        let spec = match desired.get("spec") {
            Some(s) if !s.is_null() => Some(serde_json::value::to_raw_value(s)?),
            _ => None,
        };
        let mut body = Vec::new();
        for key in BODY_FIELDS {
            if let Some(v) = desired.get(key).filter(|v| !v.is_null()) {
                body.push((key, serde_json::value::to_raw_value(v)?));
            }
        }
        Ok(Self {
            metadata,
            owns_replicas: false,
            labels,
            annotations,
            spec,
            body,
            status: None,
            kind: PhantomData,
        })
    }
}

impl LeanDeployment {
    /// The pod template, as JSON (parsed from the kept spec on demand).
    pub fn template(&self) -> Option<Value> {
        #[derive(Deserialize)]
        struct Template {
            template: Option<Value>,
        }
        let raw = self.spec.as_deref()?;
        serde_json::from_str::<Template>(raw.get()).ok()?.template
    }

    /// What the rollout is judged from. An unreadable replica count counts as
    /// unset (the API server's default, 1), like a missing one.
    pub fn state(&self) -> DeploymentState<'_> {
        #[derive(Deserialize)]
        struct Replicas {
            replicas: Option<i32>,
        }
        let replicas = self
            .spec
            .as_deref()
            .and_then(|raw| serde_json::from_str::<Replicas>(raw.get()).ok())
            .and_then(|r| r.replicas);
        DeploymentState {
            generation: self.metadata.generation.unwrap_or(0),
            replicas,
            status: self.status.as_deref(),
        }
    }
}

/// ObjectMeta as the API server sends it, minus `managedFields`: serde skips
/// that key while parsing instead of building its JSON tree only for the
/// operator to drop it. Labels and annotations stay text.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaWire {
    annotations: Option<Box<RawValue>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<Box<RawValue>>,
    managed_fields: Option<OursOwnReplicas>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// Whether an Apply entry of the operator's field manager in managedFields
/// holds `f:replicas`; each entry's field set is skipped as text, never
/// built as a tree. Of the children only a Deployment has such a field
/// (a container field by that name does not exist), so the text is enough.
struct OursOwnReplicas(bool);

impl<'de> Deserialize<'de> for OursOwnReplicas {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Entry {
            manager: Option<String>,
            operation: Option<String>,
            #[serde(rename = "fieldsV1")]
            fields: Option<Box<RawValue>>,
        }
        let entries = Vec::<Entry>::deserialize(d)?;
        Ok(Self(entries.iter().any(|e| {
            e.manager.as_deref() == Some(FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")
                && e.fields
                    .as_ref()
                    .is_some_and(|f| f.get().contains("\"f:replicas\""))
        })))
    }
}

impl MetaWire {
    /// The metadata, and the labels and annotations as text.
    fn split(self) -> (ObjectMeta, Option<Box<RawValue>>, Option<Box<RawValue>>) {
        let meta = ObjectMeta {
            annotations: None,
            creation_timestamp: self.creation_timestamp,
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            deletion_timestamp: self.deletion_timestamp,
            finalizers: self.finalizers,
            generate_name: self.generate_name,
            generation: self.generation,
            labels: None,
            managed_fields: None,
            name: self.name,
            namespace: self.namespace,
            owner_references: self.owner_references,
            resource_version: self.resource_version,
            self_link: self.self_link,
            uid: self.uid,
        };
        let annotations = self.annotations.map(without_last_applied);
        (meta, self.labels, annotations)
    }
}

/// `annotations` without the `kubectl apply` copy of the object. Only text
/// that mentions it is parsed, so the common case costs a substring search.
fn without_last_applied(annotations: Box<RawValue>) -> Box<RawValue> {
    if !annotations.get().contains(LAST_APPLIED) {
        return annotations;
    }
    let Ok(mut map) = serde_json::from_str::<BTreeMap<String, String>>(annotations.get()) else {
        return annotations;
    };
    map.remove(LAST_APPLIED);
    serde_json::value::to_raw_value(&map).unwrap_or(annotations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::subset::is_subset;
    use serde_json::json;

    fn served_deployment() -> String {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "m", "namespace": "ns", "uid": "u", "resourceVersion": "7", "generation": 3,
                "labels": {"app": "m"},
                "ownerReferences": [{"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService", "name": "m", "uid": "o", "controller": true}],
                "managedFields": [{"manager": "x", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
            },
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "m"}},
                "template": {"spec": {"containers": [{"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}
        })
        .to_string()
    }

    #[test]
    fn knows_whether_the_operator_owns_the_replica_count() {
        let d: LeanDeployment = serde_json::from_str(&served_deployment()).unwrap();
        assert!(!d.owns_replicas, "another manager's field is not ours");
        let mut v: Value = serde_json::from_str(&served_deployment()).unwrap();
        v["metadata"]["managedFields"] = json!([
            {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:template": {}}}}
        ]);
        let d: LeanDeployment = serde_json::from_str(&v.to_string()).unwrap();
        assert!(
            !d.owns_replicas,
            "only our Apply entry counts, and it lacks the field"
        );
        v["metadata"]["managedFields"][1]["fieldsV1"]["f:spec"]["f:replicas"] = json!({});
        let d: LeanDeployment = serde_json::from_str(&v.to_string()).unwrap();
        assert!(d.owns_replicas);
    }

    #[test]
    fn decodes_metadata_without_managed_fields_and_keeps_the_spec_verbatim() {
        let d: LeanDeployment = serde_json::from_str(&served_deployment()).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some("m"));
        assert_eq!(d.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(d.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(d.metadata.managed_fields, None);
        assert_eq!(d.metadata.labels, None, "labels are kept as text");
        assert_eq!(d.to_json().unwrap()["metadata"]["labels"]["app"], "m");
        let spec: Value =
            serde_json::from_str(d.spec.as_deref().map_or("null", RawValue::get)).unwrap();
        assert_eq!(spec["template"]["spec"]["containers"][0]["image"], "i:1");
    }

    #[test]
    fn a_kind_without_a_spec_keeps_what_the_operator_sets_and_compares() {
        use k8s_openapi::api::rbac::v1::RoleBinding;
        let wire = r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "m-epp", "resourceVersion": "4"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "m-epp"},
            "subjects": [{"kind": "ServiceAccount", "name": "m-epp", "namespace": "ns"}]}"#;
        let b: Lean<RoleBinding> = serde_json::from_str(wire).unwrap();
        let read = b.to_json().unwrap();
        assert_eq!(read["roleRef"]["name"], "m-epp");
        assert_eq!(read["subjects"][0]["kind"], "ServiceAccount");
        // What we apply, read back from an apply's answer, compares alike:
        // a binding to another subject would not hold what we want.
        let desired: Value = serde_json::from_str(wire).unwrap();
        let again = Lean::<RoleBinding>::from_desired(&desired)
            .unwrap()
            .to_json()
            .unwrap();
        assert_eq!(again["subjects"], read["subjects"]);
        let mut other = desired.clone();
        other["subjects"][0]["name"] = "default".into();
        assert!(!crate::core::subset::is_subset(&other, &read));
    }

    #[test]
    fn the_deployment_state_comes_from_generation_replicas_and_status() {
        let d: LeanDeployment = serde_json::from_str(&served_deployment()).unwrap();
        let s = d.state();
        assert_eq!((s.generation, s.replicas), (3, Some(2)));
        assert_eq!(s.status.and_then(|st| st.available_replicas), Some(1));
        let bare: LeanDeployment = serde_json::from_str(r#"{"metadata": {"name": "m"}}"#).unwrap();
        assert_eq!((bare.state().generation, bare.state().replicas), (0, None));
        assert!(bare.state().status.is_none());
    }

    /// What the rollout reads of a Deployment's status survives the trim,
    /// and the rest is gone.
    #[test]
    fn the_status_keeps_the_counts_and_the_progressing_reason_only() {
        use crate::core::rollout::{Rollout, rollout};
        let mut v: Value = serde_json::from_str(&served_deployment()).unwrap();
        let progressing = |reason: &str, message: &str| {
            json!({"type": "Progressing", "status": "True", "reason": reason, "message": message,
                "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"})
        };
        v["status"]["collisionCount"] = json!(1);
        v["status"]["conditions"] = json!([
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability."},
            progressing("ReplicaSetUpdated", "ReplicaSet \"m-5d8\" is progressing.")
        ]);
        let d: LeanDeployment = serde_json::from_str(&v.to_string()).unwrap();
        let st = d.status.as_deref().expect("status");
        assert_eq!(
            (st.replicas, st.updated_replicas, st.available_replicas),
            (Some(2), Some(2), Some(1))
        );
        assert_eq!(st.observed_generation, Some(3));
        assert_eq!(st.collision_count, None);
        let conditions = st.conditions.as_deref().unwrap_or_default();
        assert_eq!(conditions.len(), 1, "{conditions:?}");
        assert_eq!(conditions[0].reason.as_deref(), Some("ReplicaSetUpdated"));
        assert_eq!(conditions[0].message, None);
        assert_eq!(conditions[0].last_update_time, None);
        assert_eq!(
            rollout(Some(d.state())),
            Rollout::RollingOut {
                updated: 2,
                desired: 2,
                available: 1,
                total: 2
            }
        );

        v["status"]["conditions"][1] =
            progressing(STUCK, "ReplicaSet \"m-5d8\" has timed out progressing.");
        let d: LeanDeployment = serde_json::from_str(&v.to_string()).unwrap();
        assert_eq!(
            rollout(Some(d.state())),
            Rollout::Stuck {
                message: "ReplicaSet \"m-5d8\" has timed out progressing.".into()
            },
            "the message of a stuck rollout is reported, so kept"
        );
    }

    #[test]
    fn a_child_without_read_status_skips_it() {
        let s: LeanService = serde_json::from_str(
            r#"{"metadata": {"name": "m"}, "spec": {"ports": []}, "status": {"loadBalancer": {}}}"#,
        )
        .unwrap();
        assert!(s.status.is_some());
        assert_eq!(LeanService::kind(&()), "Service");
        assert_eq!(LeanService::api_version(&()), "v1");
        assert_eq!(LeanHpa::plural(&()), "horizontalpodautoscalers");
    }

    #[test]
    fn json_for_comparison_holds_what_we_apply_and_server_defaults() {
        let d: LeanDeployment = serde_json::from_str(&served_deployment()).unwrap();
        let desired = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "m", "namespace": "ns", "labels": {"app": "m"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}
        });
        let current = d.to_json().unwrap();
        assert!(is_subset(&desired, &current));
        let mut changed = desired.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("i:2");
        assert!(!is_subset(&changed, &current));
    }

    #[test]
    fn annotations_are_read_from_their_text() {
        let d: LeanService = serde_json::from_str(
            r#"{"metadata": {"name": "m", "annotations": {"a": "1", "b": "2"}}}"#,
        )
        .unwrap();
        assert_eq!(d.annotation("b").as_deref(), Some("2"));
        assert_eq!(d.annotation("c"), None);
        let bare: LeanService =
            serde_json::from_str(r#"{"metadata": {"annotations": null}}"#).unwrap();
        assert_eq!(bare.annotation("a"), None);
        assert!(
            bare.to_json().unwrap()["metadata"]
                .get("annotations")
                .is_none()
        );
    }

    #[test]
    fn the_kubectl_apply_copy_is_not_kept() {
        let text = format!(
            r#"{{"metadata": {{"name": "m", "annotations": {{"{LAST_APPLIED}": "{{\"big\": 1}}", "keep": "1"}}}}}}"#
        );
        let d: LeanService = serde_json::from_str(&text).unwrap();
        assert_eq!(d.annotation(LAST_APPLIED), None);
        assert_eq!(d.annotation("keep").as_deref(), Some("1"));
    }

    #[test]
    fn the_desired_object_reads_back_without_status() {
        let desired =
            json!({"metadata": {"name": "m", "namespace": "ns"}, "spec": {"replicas": 4}});
        let d = LeanDeployment::from_desired(&desired).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some("m"));
        assert!(d.status.is_none());
        assert_eq!(d.state().replicas, Some(4));
        assert_eq!(d.to_json().unwrap()["spec"], desired["spec"]);
        assert_eq!(
            d.to_json().unwrap()["metadata"]["labels"],
            desired["metadata"]["labels"]
        );
    }
}
