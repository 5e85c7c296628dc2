//! PUT, and the common tail of every write to an existing object.
//!
//! Updates, patches, applies and `/scale` writes all produce a candidate
//! object; [`finish_update`] then applies the rules the real server applies
//! to all of them alike: resourceVersion precondition, immutable identity,
//! status-subresource isolation, defaulting, validation, field ownership,
//! generation, no-op detection and finalizer-driven removal.
//!
//! The rules run at the request's version, on the stored object converted
//! to it (a real server handles a custom resource in the version of the
//! request); the result is converted back to the storage version, where
//! generation and "did anything change" are decided.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Ctx, Current, Sub};
use crate::defaults::apply_defaults;
use crate::meta::{self, meta_mut};
use crate::ssa::track::track_update;
use crate::status::ApiError;
use crate::store::Store;
use crate::validate::validate_update;

/// Whether [`finish_update`] must record field ownership itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracking {
    /// Non-apply write: the writer takes the fields it changed.
    Update,
    /// Server-side apply already updated `managedFields`.
    Applied,
}

/// Metadata the client cannot change through an update.
const IDENTITY: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
];

fn copy_status(from: &Value, to: &mut Value) {
    let Some(m) = to.as_object_mut() else {
        return;
    };
    match from.get("status") {
        Some(s) => {
            m.insert("status".into(), s.clone());
        }
        None => {
            m.remove("status");
        }
    }
}

/// Whether anything besides metadata (and status, when it is a
/// subresource) differs: the rule for bumping `metadata.generation`.
fn spec_changed(old: &Value, new: &Value, status_is_sub: bool) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.remove("metadata");
        m.remove("kind");
        m.remove("apiVersion");
        if status_is_sub {
            m.remove("status");
        }
        m
    };
    strip(old) != strip(new)
}

/// Writes `candidate` (at the request's version) over `cur` under the real
/// server's update rules and returns what is stored afterwards, at the
/// request's version (the unchanged object for a no-op).
pub fn finish_update(
    store: &mut Store,
    ctx: &Ctx,
    cur: &Current,
    candidate: Value,
    tracking: Tracking,
) -> Result<Arc<Value>, ApiError> {
    let info = ctx.info.clone();
    let old = &cur.view;
    let name = meta::name(old).to_string();
    let mut new = candidate;
    if !new.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {})",
            info.kind
        )));
    }
    let given_rv = meta::resource_version(&new);
    if !given_rv.is_empty() && given_rv != meta::resource_version(old) {
        return Err(ApiError::stale(&info, &name));
    }

    match ctx.sub {
        Sub::Main if info.status_subresource => copy_status(old, &mut new),
        Sub::Status => {
            // Only .status (and the ownership bookkeeping) may change.
            let managed = meta::meta(&new)
                .and_then(|m| m.get("managedFields"))
                .cloned();
            let mut only_status = (**old).clone();
            copy_status(&new, &mut only_status);
            if let Some(mf) = managed {
                meta_mut(&mut only_status).insert("managedFields".into(), mf);
            }
            new = only_status;
        }
        Sub::Main | Sub::Scale => {}
    }

    {
        let old_meta = meta::meta(old).cloned().unwrap_or_default();
        let m = meta_mut(&mut new);
        for k in IDENTITY {
            match old_meta.get(*k) {
                Some(v) => m.insert(k.to_string(), v.clone()),
                None => m.remove(*k),
            };
        }
        if !m.contains_key("managedFields")
            && let Some(mf) = old_meta.get("managedFields")
        {
            m.insert("managedFields".into(), mf.clone());
        }
        if let Some(o) = new.as_object_mut() {
            o.insert("apiVersion".into(), ctx.api_version.clone().into());
            o.insert("kind".into(), info.kind.clone().into());
        }
    }

    if ctx.sub == Sub::Main {
        apply_defaults(&info, &mut new, Some(old));
    }
    let errors = validate_update(&info, &new, old);
    if !errors.is_empty() {
        return Err(ApiError::invalid(&info, &name, &errors));
    }
    if tracking == Tracking::Update {
        let views = ctx.views();
        track_update(Some(old), &mut new, &ctx.writer(&views))?;
    }

    // Generation and no-op detection compare what is stored: a write at
    // another version that changes nothing there changes nothing.
    let stored_old = &cur.stored;
    let mut new = ctx.to_storage(new)?;
    if info.generation && spec_changed(stored_old, &new, info.status_subresource) {
        let g = meta::generation(stored_old).unwrap_or(0) + 1;
        meta_mut(&mut new).insert("generation".into(), g.into());
    }
    if new == **stored_old {
        // Real servers skip writes that change nothing: same resourceVersion,
        // no watch event.
        return Ok(old.clone());
    }
    if ctx.dry_run {
        return ctx.to_request(&Arc::new(new));
    }
    let key = ctx.key(&name);
    let stored = if meta::is_deleting(&new) && meta::finalizers(&new).is_empty() {
        store.commit_remove(&key, new)
    } else {
        store.commit(&key, new)
    };
    ctx.to_request(&stored)
}

/// PUT of a whole object.
pub fn update(
    store: &mut Store,
    ctx: &Ctx,
    name: &str,
    body: Value,
) -> Result<Arc<Value>, ApiError> {
    let info = ctx.info.clone();
    if !body.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {})",
            info.kind
        )));
    }
    let body_name = meta::name(&body);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta::namespace(&body);
    if info.namespaced && !body_ns.is_empty() && body_ns != ctx.namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let cur = ctx.load(store, name)?;
    let body_uid = meta::uid(&body);
    if !body_uid.is_empty() && body_uid != meta::uid(&cur.stored) {
        return Err(ApiError::conflict(
            &info,
            name,
            &format!(
                "Precondition failed: UID in precondition: {body_uid}, UID in object meta: {}",
                meta::uid(&cur.stored)
            ),
        ));
    }
    finish_update(store, ctx, &cur, body, Tracking::Update)
}
