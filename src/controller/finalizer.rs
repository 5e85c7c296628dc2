//! Adding our finalizer in the same round trip as the first apply.
//!
//! kube-runtime's `finalizer` helper, on an object without the finalizer,
//! patches it in and ends the reconcile; the children are applied only by
//! the next reconcile, which the watch event of that patch triggers. Every
//! new ModelService thus waited for one extra trip through the API server's
//! watch before its Deployment was created. Here the finalizer patch (the
//! same guarded JSON patch the helper sends) goes out at the same time as
//! the Deployment and the Service, and the helper is handed the object as it
//! will be, with its finalizer, so it runs the apply at once. Removal on
//! deletion stays with the helper.
//!
//! The patch is remembered until the cache shows it (as children and status
//! writes are, see `recent`): a reconcile that a child's watch event starts
//! right after the patch still sees the old cached object, and patching again
//! would fail its `test` and be retried for nothing.

use kube::api::Patch;
use kube::runtime::finalizer;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::lean::Lean;
use super::reconcile::FINALIZER;
use super::{Context, Error, recent};
use crate::api::ModelService;

/// The JSON patch that adds `name` to `existing`, or `None` when nothing is
/// to be added. Its `test` makes the patch fail rather than add a second copy
/// when someone changed the finalizers since we read them (the API server does
/// not deduplicate them).
pub fn add_patch(existing: &[String], name: &str) -> Option<Value> {
    if existing.iter().any(|f| f == name) {
        return None;
    }
    Some(if existing.is_empty() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [name]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": existing},
            {"op": "add", "path": "/metadata/finalizers/-", "value": name},
        ])
    })
}

/// What [`ensure`] found: `ms` as it will be once our finalizer is on, and
/// the write that puts it there, if one is still needed.
pub struct Ensured {
    pub ms: ModelService,
    pub pending: Option<json_patch::Patch>,
}

/// `ms` with our finalizer, and the patch that adds it unless the object has
/// it (or is being deleted, or our own earlier patch is merely not cached
/// yet). The patch is sent by [`add`], concurrently with the first applies:
/// the children carry owner references, so if the patch fails the garbage
/// collector still removes them, and the next reconcile tries again.
pub fn ensure(ctx: &Context, mut ms: ModelService) -> Result<Ensured, Error> {
    if ms.metadata.deletion_timestamp.is_some() {
        return Ok(Ensured { ms, pending: None });
    }
    let key = recent::key_of(&ms);
    let Some(patch) = add_patch(ms.finalizers(), FINALIZER) else {
        // The cache shows it: nothing left to remember.
        ctx.finalized.forget(&key);
        return Ok(Ensured { ms, pending: None });
    };
    let held_rv = ms.metadata.resource_version.as_deref();
    let ours = ctx.finalized.newer_than_object(&key, held_rv).is_some();
    ms.finalizers_mut().push(FINALIZER.to_string());
    if ours {
        // The server has it; the cached copy is just older than our patch.
        return Ok(Ensured { ms, pending: None });
    }
    let patch = serde_json::from_value(patch).map_err(|source| Error::Serialize {
        what: "finalizer patch",
        source,
    })?;
    Ok(Ensured {
        ms,
        pending: Some(patch),
    })
}

/// Sends the finalizer patch of [`ensure`] and remembers it until the cache
/// shows it.
pub async fn add(ctx: &Context, ms: &ModelService, patch: json_patch::Patch) -> Result<(), Error> {
    // Only the resourceVersion of the response is read.
    let api: Api<Lean<ModelService>> =
        Api::namespaced(ctx.client.clone(), &ms.namespace().unwrap_or_default());
    let patched = api
        .patch(
            &ms.name_any(),
            &super::apply::patch_params(),
            &Patch::Json::<()>(patch),
        )
        .await
        .map_err(|e| Error::Finalizer(Box::new(finalizer::Error::AddFinalizer(e))))?;
    let key = recent::key_of(ms);
    let rv = patched.metadata.resource_version.as_deref();
    ctx.finalized.record(&key, rv, ());
    if patched.metadata.generation == ms.metadata.generation {
        ctx.echoes.wrote(&key, rv);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::add_patch;
    use serde_json::json;

    #[test]
    fn first_finalizer_creates_the_list_only_if_there_is_none() {
        assert_eq!(
            add_patch(&[], "a/b"),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]},
            ]))
        );
    }

    #[test]
    fn another_finalizer_is_appended_after_testing_the_list_we_read() {
        let existing = vec!["other/x".to_string()];
        assert_eq!(
            add_patch(&existing, "a/b"),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other/x"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "a/b"},
            ]))
        );
    }

    #[test]
    fn present_finalizer_needs_no_patch() {
        let existing = vec!["other/x".to_string(), "a/b".to_string()];
        assert_eq!(add_patch(&existing, "a/b"), None);
    }

    #[test]
    fn the_patch_is_a_valid_json_patch() {
        let p = add_patch(&[], "a/b").unwrap_or_default();
        assert!(serde_json::from_value::<json_patch::Patch>(p).is_ok());
    }
}
