//! Conversion between the served versions of a custom resource.
//!
//! A real API server stores each object in one version and converts it at
//! the edges: request bodies into the storage version before storing, stored
//! objects into the request's version on the way out. For a CRD with a
//! conversion webhook the apiextensions server wraps the webhook in checks
//! of its own (right apiVersion and kind back, same name/namespace/uid) and
//! puts back the original metadata, keeping only the webhook's labels and
//! annotations. This module is that wrapper around a [`Converter`].

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::resources::ResourceInfo;
use crate::status::ApiError;

/// The object's `apiVersion`, `""` when missing.
fn api_version_of(obj: &Value) -> &str {
    obj.get("apiVersion").and_then(Value::as_str).unwrap_or("")
}

/// `obj` in `api_version`, sharing the `Arc` when it already is.
pub fn to_version(
    info: &ResourceInfo,
    obj: &Arc<Value>,
    api_version: &str,
) -> Result<Arc<Value>, ApiError> {
    if api_version_of(obj) == api_version {
        return Ok(obj.clone());
    }
    convert(info, (**obj).clone(), api_version).map(Arc::new)
}

/// `obj` converted to `api_version` (one of the type's served versions).
pub fn convert(info: &ResourceInfo, obj: Value, api_version: &str) -> Result<Value, ApiError> {
    let from = api_version_of(&obj).to_string();
    if from == api_version {
        return Ok(obj);
    }
    if !info.converts_to(api_version) {
        // What the apiextensions converter says; only reachable through a
        // bug in the fake, since requests for unserved versions are 404s.
        return Err(ApiError::internal(&format!(
            "request to convert CR to an invalid group/version: {api_version}"
        )));
    }
    let Some(hook) = info.converter() else {
        let mut obj = obj;
        if let Some(m) = obj.as_object_mut() {
            m.insert("apiVersion".into(), Value::String(api_version.to_string()));
        }
        return Ok(obj);
    };
    let gvk = format!("{from}, Kind={}", info.kind);
    let failed =
        |why: String| ApiError::internal(&format!("conversion webhook for {gvk} failed: {why}"));
    let identity = ["name", "namespace", "uid"].map(|f| crate::meta::meta_str(&obj, f).to_string());
    let original_meta = obj.get("metadata").cloned();
    let mut out = hook(obj, api_version).map_err(failed)?;
    let invalid = |why: String| {
        ApiError::internal(&format!(
            "conversion webhook for {gvk} returned invalid converted object: {why}"
        ))
    };
    if !out.is_object() {
        return Err(invalid("not an object".into()));
    }
    let got_av = api_version_of(&out);
    if got_av != api_version {
        return Err(invalid(format!(
            "invalid groupVersion (expected {api_version}, received {got_av})"
        )));
    }
    let got_kind = out.get("kind").and_then(Value::as_str).unwrap_or("");
    if got_kind != info.kind {
        return Err(invalid(format!(
            "invalid kind (expected {}, received {got_kind})",
            info.kind
        )));
    }
    for (field, want) in ["name", "namespace", "uid"].iter().zip(&identity) {
        let got = crate::meta::meta_str(&out, field);
        if want != got {
            return Err(invalid(format!(
                "must have the same {field}: {want} != {got}"
            )));
        }
    }
    restore_meta(original_meta, &mut out).map_err(|why| {
        ApiError::internal(&format!(
            "conversion webhook for {gvk} returned invalid metadata: {why}"
        ))
    })?;
    Ok(out)
}

/// Puts the original metadata back into a converted object, keeping the
/// converter's labels and annotations (the only metadata a webhook may
/// change; everything else it returns is ignored).
fn restore_meta(original: Option<Value>, out: &mut Value) -> Result<(), String> {
    let converted = out
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let had_meta = original.is_some();
    let mut meta: Map<String, Value> = match original {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for field in ["labels", "annotations"] {
        match converted.get(field) {
            None | Some(Value::Null) => {
                meta.remove(field);
            }
            Some(Value::Object(m)) => {
                if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!("metadata.{field}[{k}] must be a string"));
                }
                meta.insert(field.into(), Value::Object(m.clone()));
            }
            Some(other) => {
                return Err(format!("invalid metadata.{field} {other}"));
            }
        }
    }
    if let Some(o) = out.as_object_mut() {
        if had_meta || !meta.is_empty() {
            o.insert("metadata".into(), Value::Object(meta));
        } else {
            o.remove("metadata");
        }
    }
    Ok(())
}

/// Other versions' views of an object, for field ownership recorded at
/// those versions (see `ssa`).
pub struct Views<'a> {
    pub info: &'a ResourceInfo,
}

impl crate::ssa::Views for Views<'_> {
    fn converts_to(&self, api_version: &str) -> bool {
        self.info.converts_to(api_version)
    }

    fn view(&self, obj: &Value, api_version: &str) -> Result<Value, ApiError> {
        if api_version_of(obj) == api_version {
            return Ok(obj.clone());
        }
        convert(self.info, obj.clone(), api_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(hook: Option<crate::resources::Converter>) -> ResourceInfo {
        let i = ResourceInfo::custom("g.dev", "v2", "things", "Thing")
            .with_versions(&["v2", "v1"], "v2");
        match hook {
            Some(h) => i.with_converter(h),
            None => i,
        }
    }

    #[test]
    fn without_a_hook_only_the_api_version_changes() {
        let o = json!({"apiVersion": "g.dev/v2", "kind": "Thing", "metadata": {"name": "a"}, "spec": {"x": 1}});
        let c = convert(&info(None), o.clone(), "g.dev/v1").expect("converts");
        assert_eq!(c["apiVersion"], "g.dev/v1");
        assert_eq!(c["spec"], o["spec"]);
        assert_eq!(c["metadata"], o["metadata"]);
    }

    #[test]
    fn metadata_is_restored_except_labels_and_annotations() {
        let hook: crate::resources::Converter = Arc::new(|mut o: Value, av: &str| {
            o["apiVersion"] = json!(av);
            o["metadata"]["generation"] = json!(99);
            o["metadata"]["labels"] = json!({"converted": "yes"});
            Ok(o)
        });
        let o = json!({"apiVersion": "g.dev/v2", "kind": "Thing",
            "metadata": {"name": "a", "generation": 3, "labels": {"a": "1"}}});
        let c = convert(&info(Some(hook)), o, "g.dev/v1").expect("converts");
        assert_eq!(c["metadata"]["generation"], 3);
        assert_eq!(c["metadata"]["labels"], json!({"converted": "yes"}));
    }

    #[test]
    fn failures_are_internal_errors_naming_the_source_version() {
        let hook: crate::resources::Converter = Arc::new(|_o: Value, _av: &str| Err("boom".into()));
        let o = json!({"apiVersion": "g.dev/v2", "kind": "Thing", "metadata": {"name": "a"}});
        let e = convert(&info(Some(hook)), o, "g.dev/v1").expect_err("fails");
        assert_eq!(e.code, 500);
        assert_eq!(
            e.message,
            "Internal error occurred: conversion webhook for g.dev/v2, Kind=Thing failed: boom"
        );
    }

    #[test]
    fn a_wrong_api_version_back_is_refused() {
        let hook: crate::resources::Converter = Arc::new(|o: Value, _av: &str| Ok(o));
        let o = json!({"apiVersion": "g.dev/v2", "kind": "Thing", "metadata": {"name": "a"}});
        let e = convert(&info(Some(hook)), o, "g.dev/v1").expect_err("fails");
        assert!(e.message.contains("invalid groupVersion"), "{}", e.message);
    }
}
