//! PATCH with `application/apply-patch+yaml`: server-side apply.

use serde_json::{Map, Value, json};

use super::create::{Ownership, create};
use super::patch::Patched;
use super::update::{Tracking, finish_update};
use super::{Ctx, Sub};
use crate::meta;
use crate::ssa::apply::{ApplyParams, apply as ssa_apply};
use crate::status::ApiError;
use crate::store::Store;

/// Apply bodies are YAML; JSON (what kube-rs sends) is valid YAML.
fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(_) => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
    }
}

/// Checks the configuration and cuts it down to what this endpoint owns.
fn restrict(ctx: &Ctx, name: &str, mut config: Value) -> Result<Value, ApiError> {
    let info = &ctx.info;
    let Some(m) = config.as_object_mut() else {
        return Err(ApiError::bad_request("error decoding YAML: not an object"));
    };
    let av = m.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
    if av.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}'",
            Value::Object(m.clone())
        )));
    }
    if av != ctx.api_version || kind != info.kind {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            ctx.api_version
        )));
    }
    let body_name = meta::name(&config).to_string();
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta::namespace(&config).to_string();
    if info.namespaced && !body_ns.is_empty() && body_ns != ctx.namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if meta::meta(&config)
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|v| !v.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let m = meta::meta_mut(&mut config);
    m.insert("name".into(), json!(name));
    if info.namespaced {
        m.insert("namespace".into(), json!(ctx.namespace));
    }
    match ctx.sub {
        Sub::Status => {
            let mut only = Map::new();
            for k in ["apiVersion", "kind"] {
                if let Some(v) = config.get(k) {
                    only.insert(k.into(), v.clone());
                }
            }
            let mut md = Map::new();
            if let Some(src) = meta::meta(&config) {
                for k in ["name", "namespace", "resourceVersion"] {
                    if let Some(v) = src.get(k) {
                        md.insert(k.into(), v.clone());
                    }
                }
            }
            only.insert("metadata".into(), Value::Object(md));
            if let Some(s) = config.get("status") {
                only.insert("status".into(), s.clone());
            }
            Ok(Value::Object(only))
        }
        _ => {
            if info.status_subresource
                && let Some(o) = config.as_object_mut()
            {
                o.remove("status");
            }
            Ok(config)
        }
    }
}

/// Server-side apply of `body` to `name`, creating it when missing.
pub fn apply(
    store: &mut Store,
    ctx: &Ctx,
    name: &str,
    body: &[u8],
    force: bool,
) -> Result<Patched, ApiError> {
    if ctx.sub == Sub::Scale {
        // Treated as a merge of the Scale object's fields.
        let object =
            super::scale::patch_scale(store, ctx, name, crate::patch::PatchType::Merge, body)?;
        return Ok(Patched {
            object,
            created: false,
        });
    }
    let config = restrict(ctx, name, parse_body(body)?)?;
    let views = ctx.views();
    let params = ApplyParams {
        manager: &ctx.manager,
        force,
        api_version: &ctx.api_version,
        subresource: ctx.sub.as_str(),
        views: &views,
    };
    // Apply works on the object at the request's version; `finish_update`
    // converts the result back to storage.
    match store.get(&ctx.key(name)) {
        None => {
            if ctx.sub != Sub::Main {
                return Err(ApiError::not_found(&ctx.info, name));
            }
            if !meta::resource_version(&config).is_empty() {
                return Err(ApiError::new(
                    500,
                    "",
                    "resourceVersion should not be set on objects to be created",
                ));
            }
            let merged = ssa_apply(None, &config, &params)?;
            let object = create(store, ctx, merged, Ownership::Applied)?;
            Ok(Patched {
                object,
                created: true,
            })
        }
        Some(_) => {
            let cur = ctx.load(store, name)?;
            let merged = ssa_apply(Some(&cur.view), &config, &params)?;
            let object = finish_update(store, ctx, &cur, merged, Tracking::Applied)?;
            Ok(Patched {
                object,
                created: false,
            })
        }
    }
}
