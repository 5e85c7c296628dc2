//! DELETE: immediate removal, or `deletionTimestamp` while finalizers remain.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Ctx;
use crate::meta::{self, meta_mut};
use crate::status::ApiError;
use crate::store::{ObjKey, Store};

/// `propagationPolicy` of DeleteOptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

/// The parts of DeleteOptions the fake honours.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

impl DeleteOpts {
    /// Parses a DeleteOptions body (empty body: defaults).
    pub fn from_body(body: &[u8]) -> Result<DeleteOpts, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(DeleteOpts::default());
        }
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
        let propagation = match v.get("propagationPolicy").and_then(Value::as_str) {
            None | Some("Background") => Propagation::Background,
            Some("Foreground") => Propagation::Foreground,
            Some("Orphan") => Propagation::Orphan,
            Some(other) => {
                return Err(ApiError::invalid_kind(
                    "DeleteOptions",
                    "meta.k8s.io",
                    "",
                    &[crate::status::FieldError {
                        field: "propagationPolicy".into(),
                        reason: "FieldValueNotSupported",
                        message: format!(
                            "Unsupported value: {}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"",
                            json!(other)
                        ),
                    }],
                ));
            }
        };
        let orphan = v.get("orphanDependents").and_then(Value::as_bool) == Some(true);
        let pre = v.get("preconditions");
        let s = |k: &str| {
            pre.and_then(|p| p.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Ok(DeleteOpts {
            propagation: if orphan {
                Propagation::Orphan
            } else {
                propagation
            },
            precondition_uid: s("uid"),
            precondition_rv: s("resourceVersion"),
            dry_run: v
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x == "All")),
        })
    }
}

/// What a delete did.
pub enum Deleted {
    /// The object is gone; this was its last state.
    Removed(Arc<Value>),
    /// Finalizers (or a namespace's content) hold it; it now has a
    /// deletionTimestamp.
    Terminating(Arc<Value>),
}

const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// Deletes one object by key. Used by DELETE requests and by the garbage
/// collector, so both follow the same finalizer rules.
pub fn delete_object(
    store: &mut Store,
    key: &ObjKey,
    opts: &DeleteOpts,
) -> Result<Deleted, ApiError> {
    let info = store
        .info(&key.res.group, &key.res.plural)
        .ok_or_else(ApiError::resource_not_found)?;
    let current = store
        .get(key)
        .ok_or_else(|| ApiError::not_found(&info, &key.name))?;
    let uid = meta::uid(&current).to_string();
    if let Some(want) = &opts.precondition_uid
        && *want != uid
    {
        return Err(ApiError::conflict(
            &info,
            &key.name,
            &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
        ));
    }
    let rv = meta::resource_version(&current).to_string();
    if let Some(want) = &opts.precondition_rv
        && *want != rv
    {
        return Err(ApiError::conflict(
            &info,
            &key.name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
            ),
        ));
    }
    if info.is_namespace() && PROTECTED_NAMESPACES.contains(&key.name.as_str()) {
        return Err(ApiError::forbidden(
            &info,
            &key.name,
            "this namespace may not be deleted",
        ));
    }
    if meta::is_deleting(&current) {
        return Ok(Deleted::Terminating(current));
    }
    if crate::crds::is_crd_type(&key.res) {
        return Ok(Deleted::Terminating(crate::crds::begin_delete(
            store,
            key,
            &current,
            opts.dry_run,
        )));
    }
    if opts.dry_run {
        return Ok(Deleted::Removed(current));
    }

    if opts.propagation == Propagation::Orphan {
        orphan_dependents(store, &uid);
    }
    let mut obj = (*current).clone();
    let mut finalizers = meta::finalizers(&obj);
    // Namespaces always wait for their content instead.
    if opts.propagation == Propagation::Foreground
        && !info.is_namespace()
        && !finalizers.iter().any(|f| f == "foregroundDeletion")
    {
        finalizers.push("foregroundDeletion".into());
        meta::set_finalizers(&mut obj, &finalizers);
    }
    // Namespaces wait for their content (the "kubernetes" spec finalizer).
    if finalizers.is_empty() && !info.is_namespace() {
        return Ok(Deleted::Removed(store.commit_remove(key, obj)));
    }
    let m = meta_mut(&mut obj);
    m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
    m.insert("deletionGracePeriodSeconds".into(), json!(0));
    if let Some(g) = m.get("generation").and_then(Value::as_i64) {
        m.insert("generation".into(), json!(g + 1));
    }
    if info.is_namespace()
        && let Some(o) = obj.as_object_mut()
    {
        o.insert("status".into(), json!({"phase": "Terminating"}));
    }
    Ok(Deleted::Terminating(store.commit(key, obj)))
}

/// Removes the reference to `uid` from every dependent (Orphan policy).
fn orphan_dependents(store: &mut Store, uid: &str) {
    for dep in store.dependents_of(uid) {
        let Some(obj) = store.get(&dep) else {
            continue;
        };
        let mut obj = (*obj).clone();
        if let Some(refs) = meta_mut(&mut obj)
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            if refs.is_empty() {
                meta_mut(&mut obj).remove("ownerReferences");
            }
        }
        store.commit(&dep, obj);
    }
}

impl Deleted {
    /// The same outcome with the object at the request's version.
    fn at_request_version(self, ctx: &Ctx) -> Result<Deleted, ApiError> {
        Ok(match self {
            Deleted::Removed(o) => Deleted::Removed(ctx.to_request(&o)?),
            Deleted::Terminating(o) => Deleted::Terminating(ctx.to_request(&o)?),
        })
    }
}

/// DELETE of one object through the API. The object is read at the
/// request's version first, as a real server reads it, so a failing
/// conversion fails the delete before anything changes.
pub fn delete(
    store: &mut Store,
    ctx: &Ctx,
    name: &str,
    opts: &DeleteOpts,
) -> Result<Deleted, ApiError> {
    ctx.load(store, name)?;
    delete_object(store, &ctx.key(name), opts)?.at_request_version(ctx)
}

/// DELETE on a collection: deletes every matching object, returns them at
/// the request's version. All are converted before any is deleted, as the
/// real server lists them first.
pub fn delete_collection(
    store: &mut Store,
    ctx: &Ctx,
    filter: &crate::selector::Filter,
    opts: &DeleteOpts,
) -> Result<Vec<Arc<Value>>, ApiError> {
    let items = super::read::matching(store, ctx, filter);
    for obj in &items {
        ctx.to_request(obj)?;
    }
    let mut out = Vec::new();
    for obj in items {
        let key = ObjKey {
            res: ctx.info.key(),
            namespace: meta::namespace(&obj).to_string(),
            name: meta::name(&obj).to_string(),
        };
        match delete_object(store, &key, opts) {
            Ok(Deleted::Removed(o) | Deleted::Terminating(o)) => out.push(ctx.to_request(&o)?),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
