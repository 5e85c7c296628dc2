//! Conversion between v1alpha1 and v1beta1, for the webhook, `convert` and
//! the storage migration alike.
//!
//! It works on JSON rather than on the typed specs, for two reasons. An
//! object the API server already stores must always convert, or a single odd
//! object (stored before a rule existed, say) would make every list in the
//! other version fail; field moves cannot fail. And losslessness comes for
//! free: a v1beta1 field with no v1alpha1 home is whatever is left of the
//! v1beta1 spec once every mapped field is moved out, so a field added to
//! v1beta1 later survives a trip through v1alpha1 with no code here.

use serde_json::{Map, Value};

use crate::api::{GROUP, STORAGE_VERSION};

/// Where v1beta1-only fields wait while an object is read and written in
/// v1alpha1. It never shows on a v1beta1 read.
pub const FIELDS_ANNOTATION: &str = "serving.modelservice.dev/v1beta1-fields";

pub const V1ALPHA1: &str = "serving.modelservice.dev/v1alpha1";
pub const V1BETA1: &str = "serving.modelservice.dev/v1beta1";

/// Each v1alpha1 spec field and its place in the v1beta1 spec.
const MOVES: &[(&[&str], &[&str])] = &[
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
    // Field by field: v1beta1's autoscaling has fields v1alpha1's lacks
    // (the KEDA engine), which must wait in the annotation, not reach a
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
];

/// v1beta1 objects that v1alpha1 may leave out as a whole: the v1beta1-only
/// fields kept for them are dropped with them, since restoring those alone
/// would make a half object (an autoscaling with no bounds).
const OPTIONAL_PARENTS: &[&str] = &["autoscaling"];

/// v1beta1 values below what the v1alpha1 schema allows, with the least
/// v1alpha1 value: `autoscaling.minReplicas: 0` (scale to zero, KEDA only)
/// reads as 1 in v1alpha1, so a v1alpha1 client can write the object back,
/// and the real 0 waits in the annotation. It comes back only while the
/// v1alpha1 value is still that floor: a v1alpha1 edit of the field wins.
const NARROWED: &[(&[&str], i64)] = &[(&["autoscaling", "minReplicas"], 1)];

/// v1beta1 fields whose value is fixed in v1alpha1, which cannot express
/// them: `rollout.surge` is Never there (v1alpha1 always replaces). So a
/// v1alpha1 object reads with that value, and the value is not kept when an
/// object goes to v1alpha1. Any other value, or the field's absence (which
/// in v1beta1 means the default, not the v1alpha1 value), waits in the
/// annotation, absence as `null`, so both round trips are the identity.
const IMPLIED: &[(&[&str], &str)] = &[(&["rollout", "surge"], "Never")];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("cannot convert to {0:?}: this operator serves {V1ALPHA1} and {V1BETA1}")]
    UnknownTarget(String),
    #[error("cannot convert from {0:?}: this operator serves {V1ALPHA1} and {V1BETA1}")]
    UnknownSource(String),
    #[error("the object is not a JSON object")]
    NotAnObject,
}

/// Converts a whole ModelService (as JSON) to `desired` (an apiVersion such
/// as `serving.modelservice.dev/v1beta1`). Metadata other than the
/// annotation above and the status are carried over untouched: the status
/// has the same shape in both versions, and a conversion webhook may not
/// change metadata.
pub fn convert_object(mut obj: Value, desired: &str) -> Result<Value, ConversionError> {
    if desired != V1ALPHA1 && desired != V1BETA1 {
        return Err(ConversionError::UnknownTarget(desired.to_string()));
    }
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
    let spec = match source.as_str() {
        V1ALPHA1 => {
            let stash = take_annotation(map);
            to_v1beta1(spec, stash)
        }
        V1BETA1 => {
            let (spec, stash) = to_v1alpha1(spec);
            if let Some(stash) = stash {
                put_annotation(map, stash);
            }
            spec
        }
        other => return Err(ConversionError::UnknownSource(other.to_string())),
    };
    map.insert("apiVersion".into(), Value::String(desired.to_string()));
    map.insert("spec".into(), Value::Object(spec));
    Ok(obj)
}

/// [`convert_object`] as the webhook runs it: a result in the storage
/// version must also satisfy that version's schema and CEL rules (see
/// `api::schema_check`), with a message that names the field. Results in
/// the older version are not checked: they come from stored objects, which
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

fn to_v1beta1(
    mut alpha: Map<String, Value>,
    stash: Option<Map<String, Value>>,
) -> Map<String, Value> {
    let mut beta = Map::new();
    for (from, to) in MOVES {
        if let Some(v) = take(&mut alpha, from) {
            put(&mut beta, to, v);
        }
    }
    let mut stash = stash;
    for (path, implied) in IMPLIED {
        match stash.as_mut().and_then(|s| take(s, path)) {
            Some(Value::Null) => {}
            Some(kept) => put(&mut beta, path, kept),
            None => put(&mut beta, path, Value::from(*implied)),
        }
    }
    if let Some(mut stash) = stash {
        // The annotation is user input: it brings back only what v1alpha1
        // cannot say. A field v1alpha1 has comes from the v1alpha1 spec,
        // never from the annotation (which could otherwise swap the image
        // a v1alpha1 client sees for another).
        for (_, to) in MOVES {
            if !NARROWED.iter().any(|(n, _)| n == to) {
                take(&mut stash, to);
            }
        }
        for (path, floor) in NARROWED {
            let Some(real) = take(&mut stash, path) else {
                continue;
            };
            if get(&beta, path).and_then(Value::as_i64) == Some(*floor) {
                put(&mut beta, path, real);
            }
        }
        for (k, v) in stash {
            if OPTIONAL_PARENTS.contains(&k.as_str()) && !beta.contains_key(&k) {
                continue;
            }
            merge(&mut beta, k, v);
        }
    }
    beta
}

fn to_v1alpha1(mut beta: Map<String, Value>) -> (Map<String, Value>, Option<Map<String, Value>>) {
    let mut narrowed = Map::new();
    for (path, floor) in NARROWED {
        if let Some(v) = get(&beta, path).filter(|v| v.as_i64().is_some_and(|n| n < *floor)) {
            put(&mut narrowed, path, v.clone());
            put(&mut beta, path, Value::from(*floor));
        }
    }
    for (path, implied) in IMPLIED {
        match get(&beta, path) {
            Some(v) if v.as_str() == Some(*implied) => {
                take(&mut beta, path);
            }
            Some(_) => {}
            None => put(&mut narrowed, path, Value::Null),
        }
    }
    let mut alpha = Map::new();
    for (from, to) in MOVES {
        if let Some(v) = take(&mut beta, to) {
            put(&mut alpha, from, v);
        }
    }
    for (k, v) in narrowed {
        merge(&mut beta, k, v);
    }
    prune_empty(&mut beta);
    (alpha, (!beta.is_empty()).then_some(beta))
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

/// Sets `path` to `v`, making the objects on the way. A non-object in the
/// way is replaced: only a malformed stored object can have one.
fn put(map: &mut Map<String, Value>, path: &[&str], v: Value) {
    match path {
        [] => {}
        [last] => {
            map.insert((*last).to_string(), v);
        }
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

/// Takes the kept v1beta1 fields out of the metadata. A value that is not a
/// JSON object (edited by hand) is dropped rather than failing: a stored
/// object must always convert.
fn take_annotation(map: &mut Map<String, Value>) -> Option<Map<String, Value>> {
    let anns = annotations(map)?;
    let raw = anns.remove(FIELDS_ANNOTATION)?;
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
