//! POST: creating objects (also the "create" half of server-side apply).

use std::sync::Arc;

use serde_json::{Value, json};

use super::Ctx;
use crate::defaults::apply_defaults;
use crate::meta::{self, meta_mut};
use crate::ssa::track::track_update;
use crate::status::{ApiError, FieldError};
use crate::store::{NamespacePhase, ObjKey, Store};
use crate::validate::validate_create;

/// The longest `generateName` prefix the API server keeps (63 - 5).
const MAX_GENERATED_PREFIX: usize = 58;
/// How ownership of a new object is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// A plain create: the creator (operation Update) owns every field.
    Creator,
    /// Server-side apply already wrote `managedFields`.
    Applied,
}

fn check_type(ctx: &Ctx, obj: &Value) -> Result<(), ApiError> {
    let info = &ctx.info;
    let want_av = &ctx.api_version;
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(av) if av != want_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        _ => {}
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(k) if k != info.kind => Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            info.kind
        ))),
        _ => Ok(()),
    }
}

/// Checks and normalizes a new object; returns its key and final content
/// (without resourceVersion, which the store assigns).
pub fn prepare(store: &Store, ctx: &Ctx, mut obj: Value) -> Result<(ObjKey, Value), ApiError> {
    let info = ctx.info.clone();
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {})",
            info.kind
        )));
    }
    check_type(ctx, &obj)?;
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(ctx.api_version));
        m.insert("kind".into(), json!(info.kind));
    }
    if !meta::resource_version(&obj).is_empty() {
        // The real server's storage layer says exactly this, as a bare 500.
        return Err(ApiError::new(
            500,
            "",
            "resourceVersion should not be set on objects to be created",
        ));
    }

    let body_ns = meta::namespace(&obj).to_string();
    if info.namespaced {
        if !body_ns.is_empty() && body_ns != ctx.namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta_mut(&mut obj).insert("namespace".into(), json!(ctx.namespace));
    } else {
        meta_mut(&mut obj).remove("namespace");
    }

    let mut name = meta::name(&obj).to_string();
    if name.is_empty() {
        let generate = meta::meta_str(&obj, "generateName").to_string();
        if generate.is_empty() {
            return Err(ApiError::invalid(
                &info,
                "",
                &[FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        // As the real server: at most 58 characters of the prefix, so that
        // with the 5 random ones the name fits 63.
        let generate: String = generate.chars().take(MAX_GENERATED_PREFIX).collect();
        let state = store.resources.get(&info.key());
        name = loop {
            let candidate = format!("{generate}{}", meta::random_suffix());
            let taken = state.is_some_and(|s| {
                s.objects
                    .contains_key(&(ctx.namespace.clone(), candidate.clone()))
            });
            if !taken {
                break candidate;
            }
        };
        meta_mut(&mut obj).insert("name".into(), json!(name));
    }

    if info.namespaced {
        match store.namespace_phase(&ctx.namespace) {
            NamespacePhase::Missing => return Err(ApiError::namespace_not_found(&ctx.namespace)),
            NamespacePhase::Terminating => {
                return Err(ApiError::forbidden(
                    &info,
                    &name,
                    &format!(
                        "unable to create new content in namespace {} because it is being terminated",
                        ctx.namespace
                    ),
                ));
            }
            NamespacePhase::Active => {}
        }
    }
    let key = ctx.key(&name);
    if store.get(&key).is_some() {
        return Err(ApiError::already_exists(&info, &name));
    }

    {
        let m = meta_mut(&mut obj);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            m.remove(k);
        }
    }
    if info.status_subresource
        && let Some(m) = obj.as_object_mut()
    {
        // Creates cannot set status on types with a status subresource.
        m.remove("status");
    }
    apply_defaults(&info, &mut obj, None);
    initial_status(&info, &mut obj);

    let errors = validate_create(&info, &obj);
    if !errors.is_empty() {
        return Err(ApiError::invalid(&info, &name, &errors));
    }

    let m = meta_mut(&mut obj);
    m.insert("uid".into(), json!(meta::new_uid()));
    m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
    if info.generation {
        m.insert("generation".into(), json!(1));
    }
    Ok((key, obj))
}

/// The status a fresh object of some built-in types starts with.
fn initial_status(info: &crate::resources::ResourceInfo, obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => {
            m.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        }
        ("", "namespaces") => {
            m.insert("status".into(), json!({"phase": "Active"}));
        }
        ("apps", "deployments") | ("apps", "replicasets") => {
            m.insert("status".into(), json!({}));
        }
        ("", "services") => {
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
        _ => {}
    }
}

/// Creates an object (201 semantics) from a body at the request's version,
/// storing it at the storage version; returns it at the request's version.
/// With `dry_run` nothing is stored.
pub fn create(
    store: &mut Store,
    ctx: &Ctx,
    body: Value,
    ownership: Ownership,
) -> Result<Arc<Value>, ApiError> {
    let (key, mut obj) = prepare(store, ctx, body)?;
    if ownership == Ownership::Creator {
        let views = ctx.views();
        track_update(None, &mut obj, &ctx.writer(&views))?;
    }
    let obj = ctx.to_storage(obj)?;
    if ctx.dry_run {
        return ctx.to_request(&Arc::new(obj));
    }
    let stored = store.commit(&key, obj);
    ctx.to_request(&stored)
}
