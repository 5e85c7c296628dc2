//! The `/scale` subresource: an `autoscaling/v1` Scale view of an object.
//!
//! HPAs and `kubectl scale` write replicas through it; the fake maps it onto
//! the parent's fields via the type's [`ScalePaths`], as a CRD's
//! `scale` stanza (spec/status replicas paths, labelSelectorPath) does.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::update::{Tracking, finish_update};
use super::{Ctx, Sub};
use crate::meta::{self, get_path, set_path};
use crate::patch::{PatchType, apply_patch};
use crate::resources::{ScalePaths, SelectorSource};
use crate::status::{ApiError, FieldError};
use crate::store::Store;

/// `matchLabels`/`matchExpressions` formatted as a selector string.
fn format_selector(sel: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => parts.push(format!("{key} in ({})", values.join(","))),
                "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
                "Exists" => parts.push(key.to_string()),
                "DoesNotExist" => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.join(",")
}

fn paths(ctx: &Ctx) -> Result<&ScalePaths, ApiError> {
    ctx.info
        .scale
        .as_ref()
        .ok_or_else(ApiError::resource_not_found)
}

/// The Scale object of `obj`.
pub fn scale_of(scale: &ScalePaths, obj: &Value) -> Value {
    let replicas = |p: &str| get_path(obj, p).and_then(Value::as_i64).unwrap_or(0);
    let mut md = Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta::meta(obj).and_then(|m| m.get(k)) {
            md.insert(k.into(), v.clone());
        }
    }
    let mut status = Map::new();
    status.insert("replicas".into(), json!(replicas(&scale.status_replicas)));
    let selector = match &scale.selector {
        SelectorSource::Path(p) => get_path(obj, p).and_then(Value::as_str).map(str::to_string),
        SelectorSource::SpecSelector => get_path(obj, "spec.selector").map(format_selector),
        SelectorSource::None => None,
    };
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status.insert("selector".into(), json!(s));
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": md,
        "spec": {"replicas": replicas(&scale.spec_replicas)},
        "status": status,
    })
}

/// GET of `/scale`: read from the object at the request's version, whose
/// scale paths they are.
pub fn get_scale(store: &Store, ctx: &Ctx, name: &str) -> Result<Value, ApiError> {
    let paths = paths(ctx)?;
    let cur = ctx.load(store, name)?;
    Ok(scale_of(paths, &cur.view))
}

/// Writes a (whole) Scale back to its parent; returns the new Scale.
pub fn write_scale(
    store: &mut Store,
    ctx: &Ctx,
    name: &str,
    scale: &Value,
) -> Result<Arc<Value>, ApiError> {
    let paths = paths(ctx)?.clone();
    let cur = ctx.load(store, name)?;
    let replicas = scale.get("spec").and_then(|s| s.get("replicas"));
    let n = match replicas {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 => n,
            _ => {
                return Err(ApiError::invalid_kind(
                    "Scale",
                    "autoscaling",
                    name,
                    &[FieldError::invalid(
                        "spec.replicas",
                        &v.to_string(),
                        "must be greater than or equal to 0",
                    )],
                ));
            }
        },
    };
    let given_rv = meta::resource_version(scale);
    if !given_rv.is_empty() && given_rv != meta::resource_version(&cur.stored) {
        return Err(ApiError::stale(&ctx.info, name));
    }
    let mut candidate = (*cur.view).clone();
    set_path(&mut candidate, &paths.spec_replicas, json!(n));
    let ctx = ctx.with_sub(Sub::Scale);
    let stored = finish_update(store, &ctx, &cur, candidate, Tracking::Update)?;
    Ok(Arc::new(scale_of(&paths, &stored)))
}

/// PATCH of `/scale`: the patch applies to the Scale view.
pub fn patch_scale(
    store: &mut Store,
    ctx: &Ctx,
    name: &str,
    kind: PatchType,
    body: &[u8],
) -> Result<Arc<Value>, ApiError> {
    let mut current = get_scale(store, ctx, name)?;
    let rv_before = meta::resource_version(&current).to_string();
    apply_patch(kind, &mut current, body)?;
    // Only a resourceVersion the patch itself sets is a precondition.
    if meta::resource_version(&current) == rv_before
        && let Some(m) = current.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.remove("resourceVersion");
    }
    write_scale(store, ctx, name, &current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_formatting() {
        let sel = json!({"matchLabels": {"app": "x"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]}
        ]});
        assert_eq!(format_selector(&sel), "app=x,tier in (a,b)");
    }
}
