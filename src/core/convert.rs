//! Conversion between the served versions, for the webhook, `convert` and
//! the storage migration alike, with v1 as the hub: every older version (a
//! [`Spoke`]) converts to and from v1 only, so v1alpha1 ↔ v1beta1 goes
//! through v1, and a fourth version costs one table, not a function per
//! pair.
//!
//! It works on JSON rather than on the typed specs, for two reasons. An
//! object the API server already stores must always convert, or a single odd
//! object (stored before a rule existed, say) would make every list in the
//! other version fail; field moves cannot fail. And losslessness comes for
//! free: a v1 field with no home in an older version is whatever is left of
//! the v1 spec once every mapped field is moved out, so a field added to v1
//! later survives a trip through an older version with no code here.

use serde_json::{Map, Value};

use crate::api::{GROUP, STORAGE_VERSION};

/// Where v1 fields that an older version cannot express wait while an
/// object is read and written in that version. It never shows on a v1 read.
pub const FIELDS_ANNOTATION: &str = "serving.modelservice.dev/v1-fields";

/// What the v1beta1 release kept on v1alpha1 objects, in the v1beta1 shape.
/// A v1alpha1 client that read an object from that release may still send
/// it back: it is read as v1beta1 fields, under the same trust rules.
pub const LEGACY_FIELDS_ANNOTATION: &str = "serving.modelservice.dev/v1beta1-fields";

pub const V1: &str = "serving.modelservice.dev/v1";
pub const V1BETA1: &str = "serving.modelservice.dev/v1beta1";
pub const V1ALPHA1: &str = "serving.modelservice.dev/v1alpha1";

/// Every apiVersion served, the hub first.
pub const SERVED: &[&str] = &[V1, V1BETA1, V1ALPHA1];

type Path = &'static [&'static str];

/// An older version, described by how its spec maps onto v1's.
struct Spoke {
    api_version: &'static str,
    /// Each of its spec fields (or whole objects) and their place in v1,
    /// the more specific first: a field moved on its own is out of the way
    /// before the object around it moves as a whole.
    moves: &'static [(Path, Path)],
    /// v1 objects this version may leave out as a whole: the v1-only fields
    /// kept for them are dropped with them, since restoring those alone
    /// would make a half object (an autoscaling with no bounds).
    optional_parents: &'static [&'static str],
    /// v1 values below what this version's schema allows, with the least
    /// value it allows: `autoscaling.minReplicas: 0` (scale to zero, KEDA
    /// only) reads as 1 in v1alpha1, so a v1alpha1 client can write the
    /// object back, and the real 0 waits in the annotation. It comes back
    /// only while the older value is still that floor: an edit of the field
    /// in the older version wins.
    narrowed: &'static [(Path, i64)],
    /// v1 fields whose value is fixed in this version, which cannot express
    /// them: `rollout.surge` is Never in v1alpha1 (which always replaces).
    /// An object in this version reads with that value, and the value is not
    /// kept when an object goes to this version. Any other value, or the
    /// field's absence (which in v1 means the default, not this version's
    /// value), waits in the annotation, absence as `null`, so both round
    /// trips are the identity.
    implied: &'static [(Path, &'static str)],
}

/// v1alpha1: flat, and older than everything grouped.
const V1ALPHA1_SPOKE: Spoke = Spoke {
    api_version: V1ALPHA1,
    moves: &[
        (&["model"], &["model", "name"]),
        (&["modelVersion"], &["model", "version"]),
        (&["image"], &["runtime", "image"]),
        (&["args"], &["runtime", "args"]),
        (&["env"], &["runtime", "env"]),
        (&["port"], &["runtime", "port"]),
        (&["replicas"], &["replicas"]),
        (&["gpus"], &["resources", "gpus"]),
        (&["gpuResource"], &["resources", "gpuResource"]),
        (&["resources", "cpu"], &["resources", "cpu"]),
        (&["resources", "memory"], &["resources", "memory"]),
        (&["nodeSelector"], &["scheduling", "nodeSelector"]),
        (&["tolerations"], &["scheduling", "tolerations"]),
        (&["strategy"], &["rollout", "strategy"]),
        // Field by field: v1's autoscaling has fields v1alpha1's lacks (the
        // KEDA engine), which must wait in the annotation, not reach a
        // v1alpha1 object whose schema would prune them.
        (
            &["autoscaling", "minReplicas"],
            &["autoscaling", "minReplicas"],
        ),
        (
            &["autoscaling", "maxReplicas"],
            &["autoscaling", "maxReplicas"],
        ),
        (
            &["autoscaling", "targetQueueLength"],
            &["autoscaling", "targetQueueLength"],
        ),
        (&["autoscaling", "metric"], &["autoscaling", "metric"]),
    ],
    optional_parents: &["autoscaling"],
    narrowed: &[(&["autoscaling", "minReplicas"], 1)],
    implied: &[(&["rollout", "surge"], "Never")],
};

/// v1beta1: v1's shape but for the KEDA knobs, which sat flat in
/// `autoscaling` and moved into `autoscaling.keda`.
const V1BETA1_SPOKE: Spoke = Spoke {
    api_version: V1BETA1,
    moves: &[
        (
            &["autoscaling", "prometheus"],
            &["autoscaling", "keda", "prometheus"],
        ),
        (
            &["autoscaling", "activationQueueLength"],
            &["autoscaling", "keda", "activationQueueLength"],
        ),
        (
            &["autoscaling", "cooldownSeconds"],
            &["autoscaling", "keda", "cooldownSeconds"],
        ),
        (
            &["autoscaling", "pollingSeconds"],
            &["autoscaling", "keda", "pollingSeconds"],
        ),
        (&["model"], &["model"]),
        (&["runtime"], &["runtime"]),
        (&["replicas"], &["replicas"]),
        (&["resources"], &["resources"]),
        (&["scheduling"], &["scheduling"]),
        (&["rollout"], &["rollout"]),
        (&["route"], &["route"]),
        (&["autoscaling"], &["autoscaling"]),
        (&["parallelism"], &["parallelism"]),
    ],
    optional_parents: &[],
    narrowed: &[],
    implied: &[],
};

const SPOKES: &[&Spoke] = &[&V1BETA1_SPOKE, &V1ALPHA1_SPOKE];

fn spoke(api_version: &str) -> Option<&'static Spoke> {
    SPOKES
        .iter()
        .copied()
        .find(|s| s.api_version == api_version)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("cannot convert to {0:?}: this operator serves {V1}, {V1BETA1} and {V1ALPHA1}")]
    UnknownTarget(String),
    #[error("cannot convert from {0:?}: this operator serves {V1}, {V1BETA1} and {V1ALPHA1}")]
    UnknownSource(String),
    #[error("the object is not a JSON object")]
    NotAnObject,
}

/// Converts a whole ModelService (as JSON) to `desired` (an apiVersion such
/// as `serving.modelservice.dev/v1`), through v1. Metadata other than the
/// kept-fields annotations and the status are carried over untouched: the
/// status has the same shape in every version, and a conversion webhook may
/// not change metadata.
pub fn convert_object(mut obj: Value, desired: &str) -> Result<Value, ConversionError> {
    let target = match desired {
        V1 => None,
        other => Some(spoke(other).ok_or_else(|| ConversionError::UnknownTarget(other.into()))?),
    };
    let map = obj.as_object_mut().ok_or(ConversionError::NotAnObject)?;
    let source = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if source == desired {
        return Ok(obj);
    }
    let spec = match map.remove("spec") {
        Some(Value::Object(s)) => s,
        _ => Map::new(),
    };
    let hub = match source.as_str() {
        V1 => {
            // On a v1 object these annotations mean nothing (the API server
            // never made them); kept, they would come back as fields.
            take_annotation(map, FIELDS_ANNOTATION);
            take_annotation(map, LEGACY_FIELDS_ANNOTATION);
            spec
        }
        other => {
            let from = spoke(other).ok_or_else(|| ConversionError::UnknownSource(other.into()))?;
            let kept = kept_fields(map);
            to_hub(from, spec, kept)
        }
    };
    let spec = match target {
        None => hub,
        Some(to) => {
            let (spec, kept) = from_hub(to, hub);
            if let Some(kept) = kept {
                put_annotation(map, kept);
            }
            spec
        }
    };
    map.insert("apiVersion".into(), Value::String(desired.to_string()));
    map.insert("spec".into(), Value::Object(spec));
    Ok(obj)
}

/// [`convert_object`] as the webhook runs it: a result in the storage
/// version must also satisfy that version's schema and CEL rules (see
/// `api::schema_check`), with a message that names the field. Results in
/// the older versions are not checked: they come from stored objects, which
/// passed the storage schema, and refusing one would fail every list in
/// that version.
pub fn convert_checked(obj: Value, desired: &str) -> Result<Value, String> {
    let converted = convert_object(obj, desired).map_err(|e| e.to_string())?;
    if desired == storage_api_version() {
        crate::api::schema_check::check_storage_version(&converted)
            .map_err(|e| format!("the result breaks the {desired} schema: {e}"))?;
    }
    Ok(converted)
}

/// The apiVersion of a version name (`v1beta1` → `serving.modelservice.dev/v1beta1`).
pub fn api_version(version: &str) -> String {
    format!("{GROUP}/{version}")
}

/// The storage version's apiVersion.
pub fn storage_api_version() -> String {
    api_version(STORAGE_VERSION)
}

/// The v1 fields an object in an older version carries in its metadata:
/// the annotation, over what the v1beta1 release kept (in its own shape).
fn kept_fields(map: &mut Map<String, Value>) -> Option<Map<String, Value>> {
    let legacy = take_annotation(map, LEGACY_FIELDS_ANNOTATION)
        .map(|beta| to_hub(&V1BETA1_SPOKE, beta, None));
    let current = take_annotation(map, FIELDS_ANNOTATION);
    match (legacy, current) {
        (None, current) => current,
        (Some(mut legacy), Some(current)) => {
            for (k, v) in current {
                merge(&mut legacy, k, v);
            }
            Some(legacy)
        }
        (legacy, None) => legacy,
    }
}

fn to_hub(
    from: &Spoke,
    mut spec: Map<String, Value>,
    kept: Option<Map<String, Value>>,
) -> Map<String, Value> {
    let mut hub = Map::new();
    for (from_path, to) in from.moves {
        if let Some(v) = take(&mut spec, from_path) {
            put(&mut hub, to, v);
        }
    }
    let mut kept = kept;
    for (path, implied) in from.implied {
        match kept.as_mut().and_then(|s| take(s, path)) {
            Some(Value::Null) => {}
            Some(v) => put(&mut hub, path, v),
            None => put(&mut hub, path, Value::from(*implied)),
        }
    }
    if let Some(mut kept) = kept {
        // The annotation is user input: it brings back only what the older
        // version cannot say. A field it has comes from its spec, never
        // from the annotation (which could otherwise swap the image a
        // v1alpha1 client sees for another).
        let mut floors = Map::new();
        for (path, _) in from.narrowed {
            if let Some(v) = take(&mut kept, path) {
                put(&mut floors, path, v);
            }
        }
        for (_, to) in from.moves {
            take(&mut kept, to);
        }
        for (path, floor) in from.narrowed {
            let Some(real) = take(&mut floors, path) else {
                continue;
            };
            if get(&hub, path).and_then(Value::as_i64) == Some(*floor) {
                put(&mut hub, path, real);
            }
        }
        for (k, v) in kept {
            if from.optional_parents.contains(&k.as_str()) && !hub.contains_key(&k) {
                continue;
            }
            merge(&mut hub, k, v);
        }
    }
    hub
}

fn from_hub(
    to: &Spoke,
    mut hub: Map<String, Value>,
) -> (Map<String, Value>, Option<Map<String, Value>>) {
    let mut kept = Map::new();
    for (path, floor) in to.narrowed {
        if let Some(v) = get(&hub, path).filter(|v| v.as_i64().is_some_and(|n| n < *floor)) {
            put(&mut kept, path, v.clone());
            put(&mut hub, path, Value::from(*floor));
        }
    }
    for (path, implied) in to.implied {
        match get(&hub, path) {
            Some(v) if v.as_str() == Some(*implied) => {
                take(&mut hub, path);
            }
            Some(_) => {}
            None => put(&mut kept, path, Value::Null),
        }
    }
    let mut spec = Map::new();
    for (to_path, from) in to.moves {
        if let Some(v) = take(&mut hub, from) {
            put(&mut spec, to_path, v);
        }
    }
    for (k, v) in kept {
        merge(&mut hub, k, v);
    }
    prune_empty(&mut hub);
    (spec, (!hub.is_empty()).then_some(hub))
}

/// The value at `path`, if there is one.
fn get<'a>(map: &'a Map<String, Value>, path: &[&str]) -> Option<&'a Value> {
    match path {
        [] => None,
        [last] => map.get(*last),
        [first, rest @ ..] => get(map.get(*first)?.as_object()?, rest),
    }
}

/// Removes the value at `path`, and any object on the way that it leaves empty.
fn take(map: &mut Map<String, Value>, path: &[&str]) -> Option<Value> {
    match path {
        [] => None,
        [last] => map.remove(*last),
        [first, rest @ ..] => {
            let child = map.get_mut(*first)?.as_object_mut()?;
            let v = take(child, rest);
            if child.is_empty() {
                map.remove(*first);
            }
            v
        }
    }
}

/// Sets `path` to `v`, making the objects on the way; an object already
/// there takes `v`'s fields (a field moved on its own may have arrived
/// before the object it belongs to). A non-object in the way is replaced:
/// only a malformed stored object can have one.
fn put(map: &mut Map<String, Value>, path: &[&str], v: Value) {
    match path {
        [] => {}
        [last] => merge(map, (*last).to_string(), v),
        [first, rest @ ..] => {
            let child = map
                .entry((*first).to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !child.is_object() {
                *child = Value::Object(Map::new());
            }
            if let Value::Object(c) = child {
                put(c, rest, v);
            }
        }
    }
}

/// Deep-merges `v` into `map[k]`; on a leaf, `v` wins.
fn merge(map: &mut Map<String, Value>, k: String, v: Value) {
    match (map.get_mut(&k), v) {
        (Some(Value::Object(into)), Value::Object(from)) => {
            for (k2, v2) in from {
                merge(into, k2, v2);
            }
        }
        (_, v) => {
            map.insert(k, v);
        }
    }
}

fn prune_empty(map: &mut Map<String, Value>) {
    map.retain(|_, v| {
        if let Value::Object(m) = v {
            prune_empty(m);
            !m.is_empty()
        } else {
            true
        }
    });
}

fn annotations(map: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    map.get_mut("metadata")?
        .as_object_mut()?
        .get_mut("annotations")?
        .as_object_mut()
}

/// Takes kept fields out of the metadata. A value that is not a JSON object
/// (edited by hand) is dropped rather than failing: a stored object must
/// always convert.
fn take_annotation(map: &mut Map<String, Value>, name: &str) -> Option<Map<String, Value>> {
    let anns = annotations(map)?;
    let raw = anns.remove(name)?;
    if anns.is_empty()
        && let Some(Value::Object(meta)) = map.get_mut("metadata")
    {
        meta.remove("annotations");
    }
    match serde_json::from_str::<Value>(raw.as_str()?) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn put_annotation(map: &mut Map<String, Value>, stash: Map<String, Value>) {
    let text = Value::Object(stash).to_string();
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        let anns = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(anns) = anns {
            anns.insert(FIELDS_ANNOTATION.into(), Value::String(text));
        }
    }
}
