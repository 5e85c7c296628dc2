//! CustomResourceDefinitions written through the API become served types.
//!
//! A real apiextensions server serves a type once its CRD is written (and
//! its names accepted), and stops serving it, with its objects gone, once
//! the CRD is deleted. Tests apply upstream CRDs (KEDA's, Gateway API's)
//! exactly as they would to a real cluster, so the fake derives a
//! [`ResourceInfo`] from each stored CRD instead of needing a Rust twin of
//! it. What the apiextensions registry does inside the write (defaults,
//! validation, the cleanup finalizer on delete) happens in the write here
//! too; what its controllers do afterwards (establishing, cleaning up)
//! runs in [`controller`], a task of its own, so clients see the same
//! short delay as on a real server.

mod controller;
mod validate;

use serde_json::{Map, Value, json};

pub(crate) use controller::{note_write, spawn};
pub use validate::validate;

use crate::meta::{self, meta_mut};
use crate::resources::{ResKey, ResourceInfo, ScalePaths, SelectorSource};
use crate::status::ApiError;
use crate::store::{ObjKey, Store};

pub const GROUP: &str = "apiextensions.k8s.io";
pub const PLURAL: &str = "customresourcedefinitions";

/// The finalizer the real server puts on a CRD being deleted, so that its
/// objects are deleted before it goes.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

pub fn is_crd_type(res: &ResKey) -> bool {
    res.group == GROUP && res.plural == PLURAL
}

/// Where the CRD named `name` (`plural.group`) is stored.
pub fn crd_key(name: &str) -> ObjKey {
    ObjKey {
        res: ResKey::new(GROUP, PLURAL),
        namespace: String::new(),
        name: name.to_string(),
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn versions(crd: &Value) -> &[Value] {
    crd.get("spec")
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn is_true(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool) == Some(true)
}

/// The name of the first version marked `storage: true`.
pub fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd)
        .iter()
        .find(|v| is_true(v, "storage"))
        .and_then(|v| str_at(v, "name"))
}

/// A CRD path (`.spec.replicas`) as the fake's dotted paths write it.
fn dotted(path: &str) -> String {
    path.strip_prefix('.').unwrap_or(path).to_string()
}

/// The subresources the type gets. They are per version in a CRD but one
/// set in [`ResourceInfo`]: the storage version's, else those of the first
/// version that declares any.
fn subresources(versions: &[Value]) -> Option<&Value> {
    let declared = |v: &&Value| v.get("subresources").is_some_and(Value::is_object);
    versions
        .iter()
        .filter(|v| is_true(v, "storage"))
        .find(declared)
        .or_else(|| versions.iter().find(declared))
        .and_then(|v| v.get("subresources"))
}

/// The type a CRD declares, or `None` if it lacks something serving needs
/// (validation refuses such CRDs, so only a CRD stored by other means).
pub fn derive(crd: &Value) -> Option<ResourceInfo> {
    let spec = crd.get("spec")?;
    let group = str_at(spec, "group")?;
    let names = spec.get("names")?;
    let plural = str_at(names, "plural")?;
    let kind = str_at(names, "kind")?;
    let versions = versions(crd);
    let storage = storage_version(crd)?;
    let served: Vec<&str> = versions
        .iter()
        .filter(|v| is_true(v, "served"))
        .filter_map(|v| str_at(v, "name"))
        .collect();
    let mut info =
        ResourceInfo::custom(group, storage, plural, kind).with_versions(&served, storage);
    if str_at(spec, "scope") == Some("Cluster") {
        info = info.cluster_scoped();
    }
    if let Some(subs) = subresources(versions) {
        if subs.get("status").is_some_and(|s| !s.is_null()) {
            info = info.with_status();
        }
        if let Some(scale) = subs.get("scale").filter(|s| s.is_object()) {
            info = info.with_scale(ScalePaths {
                spec_replicas: dotted(str_at(scale, "specReplicasPath")?),
                status_replicas: dotted(str_at(scale, "statusReplicasPath")?),
                selector: match str_at(scale, "labelSelectorPath") {
                    Some(p) => SelectorSource::Path(dotted(p)),
                    None => SelectorSource::None,
                },
            });
        }
    }
    for v in versions {
        let fields = v.get("selectableFields").and_then(Value::as_array);
        for path in fields
            .into_iter()
            .flatten()
            .filter_map(|f| str_at(f, "jsonPath"))
        {
            let path = dotted(path);
            if !info.field_selectors.contains(&path) {
                info.field_selectors.push(path);
            }
        }
    }
    Some(info)
}

/// Sets `field` when it is missing or empty, as Go defaulting does.
fn default_str(m: &mut Map<String, Value>, field: &str, value: String) {
    if m.get(field)
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        m.insert(field.into(), Value::String(value));
    }
}

/// What the apiextensions registry fills in on every write: name defaults,
/// `conversion.strategy: None`, and `status.storedVersions` (the storage
/// version on create, appended when the storage version changes), with
/// the empty `acceptedNames` a fresh CRD shows until its names are accepted.
pub fn apply_defaults(obj: &mut Value, old: Option<&Value>) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
            let kind = names
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !kind.is_empty() {
                default_str(names, "singular", kind.to_lowercase());
                default_str(names, "listKind", format!("{kind}List"));
            }
        }
        let conversion = spec
            .entry("conversion")
            .or_insert_with(|| json!({"strategy": "None"}));
        if let Some(service) = conversion
            .pointer_mut("/webhook/clientConfig/service")
            .and_then(Value::as_object_mut)
        {
            service.entry("port").or_insert(json!(443));
        }
    }
    let storage = storage_version(obj).map(str::to_string);
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    if old.is_none() {
        let mut status = json!({"acceptedNames": {"plural": "", "kind": ""}});
        if let Some(s) = &storage {
            status["storedVersions"] = json!([s]);
        }
        m.insert("status".into(), status);
        return;
    }
    let Some(storage) = storage else {
        return;
    };
    let status = m.entry("status").or_insert_with(|| json!({}));
    if let Some(st) = status.as_object_mut() {
        let stored = st.entry("storedVersions").or_insert_with(|| json!([]));
        if let Some(list) = stored.as_array_mut()
            && !list.iter().any(|v| v.as_str() == Some(&storage))
        {
            list.push(json!(storage));
        }
    }
}

/// Sets a condition of a CRD's `status.conditions`, keeping its
/// `lastTransitionTime` when its status does not change. Returns whether
/// anything changed.
fn set_condition(crd: &mut Value, kind: &str, reason: &str, message: &str) -> bool {
    let Some(obj) = crd.as_object_mut() else {
        return false;
    };
    let status = obj.entry("status").or_insert_with(|| json!({}));
    let Some(status) = status.as_object_mut() else {
        return false;
    };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return false;
    };
    let existing = list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind));
    let since = match &existing {
        Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => c
            .get("lastTransitionTime")
            .cloned()
            .unwrap_or_else(|| json!(meta::now_rfc3339())),
        _ => json!(meta::now_rfc3339()),
    };
    let wanted = json!({
        "type": kind, "status": "True", "lastTransitionTime": since,
        "reason": reason, "message": message,
    });
    match existing {
        Some(c) if *c == wanted => false,
        Some(c) => {
            *c = wanted;
            true
        }
        None => {
            list.push(wanted);
            true
        }
    }
}

/// The first DELETE of a CRD, as the real registry does it: instead of
/// removing it, it gets a deletionTimestamp, the cleanup finalizer and a
/// Terminating condition (the generation stays); the controller then
/// deletes the objects and removes the finalizer. A dry run shows that
/// object without storing it.
pub fn begin_delete(
    store: &mut Store,
    key: &ObjKey,
    current: &Value,
    dry_run: bool,
) -> std::sync::Arc<Value> {
    let mut obj = current.clone();
    let mut finalizers = meta::finalizers(&obj);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(CLEANUP_FINALIZER.into());
        meta::set_finalizers(&mut obj, &finalizers);
    }
    let m = meta_mut(&mut obj);
    m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
    m.insert("deletionGracePeriodSeconds".into(), json!(0));
    set_condition(
        &mut obj,
        "Terminating",
        "InstanceDeletionPending",
        "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
    );
    if dry_run {
        return std::sync::Arc::new(obj);
    }
    store.commit(key, obj)
}

/// A real server refuses new objects of a type whose CRD is being
/// deleted (apply can still create them; the cleanup deletes those too).
pub fn check_create(store: &Store, info: &ResourceInfo) -> Result<(), ApiError> {
    if !info.custom {
        return Ok(());
    }
    let crd = store.get(&crd_key(&info.group_resource()));
    if crd.is_some_and(|c| meta::is_deleting(&c)) {
        return Err(ApiError::create_while_terminating(info));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(subresources: Value) -> Value {
        json!({
            "metadata": {"name": "widgets.diff.example.dev"},
            "spec": {
                "group": "diff.example.dev", "scope": "Cluster",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true, "subresources": subresources,
                     "selectableFields": [{"jsonPath": ".spec.color"}]},
                    {"name": "v0", "served": false, "storage": false},
                ],
            },
        })
    }

    #[test]
    fn a_crd_declares_versions_scope_and_subresources() {
        let info = derive(&crd(json!({
            "status": {},
            "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                      "labelSelectorPath": ".status.selector"},
        })))
        .expect("derives");
        let want = ResourceInfo::custom("diff.example.dev", "v1", "widgets", "Widget")
            .with_versions(&["v1alpha1", "v1"], "v1")
            .cluster_scoped()
            .with_status()
            .with_scale(ScalePaths {
                spec_replicas: "spec.replicas".into(),
                status_replicas: "status.replicas".into(),
                selector: SelectorSource::Path("status.selector".into()),
            });
        assert_eq!(info.field_selectors, ["spec.color"]);
        let mut info = info;
        info.field_selectors.clear();
        assert_eq!(info, want);
    }

    #[test]
    fn without_subresources_or_a_storage_version() {
        let info = derive(&crd(json!(null))).expect("derives");
        assert!(!info.status_subresource && info.scale.is_none());
        let mut none = crd(json!(null));
        none["spec"]["versions"][1]["storage"] = json!(false);
        assert!(derive(&none).is_none());
    }

    #[test]
    fn defaults_and_stored_versions() {
        let mut c = crd(json!(null));
        apply_defaults(&mut c, None);
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
        let old = c.clone();
        c["spec"]["versions"][1]["storage"] = json!(false);
        c["spec"]["versions"][0]["storage"] = json!(true);
        apply_defaults(&mut c, Some(&old));
        assert_eq!(c["status"]["storedVersions"], json!(["v1", "v1alpha1"]));
    }

    #[test]
    fn conditions_keep_their_transition_time() {
        let mut c = json!({"status": {"conditions": [{"type": "Established", "status": "True",
            "lastTransitionTime": "2020-01-01T00:00:00Z", "reason": "R", "message": "m"}]}});
        assert!(!set_condition(&mut c, "Established", "R", "m"));
        assert!(set_condition(&mut c, "Established", "R2", "m"));
        assert_eq!(
            c["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert!(set_condition(&mut c, "NamesAccepted", "R", "m"));
        assert_eq!(c["status"]["conditions"].as_array().map(Vec::len), Some(2));
    }
}
