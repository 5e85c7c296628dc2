//! Objects that cannot be read as a ModelService (stored under an older or
//! newer schema, or written around validation).
//!
//! The watch's `Guarded` decoding (kube's `DeserializeGuard`, only cheaper)
//! hands them to us instead of breaking the watch for every other object. We
//! say what is wrong in status, once, and never block their deletion.

use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::core::error_boundary::InvalidObject;
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use serde_json::json;
use tracing::warn;

use super::apply::FIELD_MANAGER;
use super::error::is_not_found;
use super::reconcile::FINALIZER;
use super::{Context, Error};
use crate::core::reasons;
use crate::core::status::now_seconds;

fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            crate::api::GROUP,
            crate::api::STORAGE_VERSION,
            "ModelService",
        ),
        "modelservices",
    )
}

/// Handles one unreadable object.
pub async fn handle(bad: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    let meta = &bad.metadata;
    let (Some(ns), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
        return Err(Error::MissingField("metadata.name or metadata.namespace"));
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &api_resource());
    let finalizers = meta.finalizers.clone().unwrap_or_default();

    if meta.deletion_timestamp.is_some() {
        // Never let an unreadable object hang its deletion on us.
        if finalizers.iter().any(|f| f == FINALIZER) {
            // The resourceVersion makes this a compare-and-swap, like the
            // finalizer helper's JSON-patch `test`: a concurrent change to the
            // list fails with 409 and is retried, never lost.
            let rest: Vec<&String> = finalizers.iter().filter(|f| *f != FINALIZER).collect();
            let patch =
                json!({"metadata": {"finalizers": rest, "resourceVersion": meta.resource_version}});
            match api
                .patch(&name, &super::apply::patch_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(Error::kube(format!("removing finalizer of {ns}/{name}"), e)),
            }
        }
        ctx.metrics.forget(&ns, &name);
        super::apply::forget(ctx, &ns, &name);
        return Ok(Action::await_change());
    }

    let key = super::context::object_key(&ns, &name);
    let marker = format!("{}:{}", meta.generation.unwrap_or(0), bad.error);
    let reported = ctx
        .reported_invalid
        .lock()
        .is_ok_and(|m| m.get(&key) == Some(&marker));
    if reported {
        return Ok(Action::await_change());
    }
    warn!(namespace = %ns, name = %name, error = %bad.error, "ModelService cannot be read");
    let now = now_seconds(k8s_openapi::jiff::Timestamp::now());
    let message = format!(
        "the object does not match the ModelService schema: {}; fix the spec (kubectl edit) or re-apply it",
        bad.error
    );
    let generation = meta.generation.unwrap_or(0);
    let cond = |type_: &str, status: &str| {
        json!({"type": type_, "status": status, "reason": reasons::INVALID_OBJECT, "message": message,
               "observedGeneration": generation, "lastTransitionTime": now})
    };
    let patch = json!({"status": {"observedGeneration": generation, "conditions": [
        cond("Ready", "False"), cond("Progressing", "False"), cond("Degraded", "True")]}});
    match api
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
        Err(e) => return Err(Error::kube(format!("writing status of {ns}/{name}"), e)),
    }
    if let Ok(mut m) = ctx.reported_invalid.lock() {
        m.insert(key, marker);
    }
    Ok(Action::await_change())
}
