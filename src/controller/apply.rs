//! Step 4, apply: server-side apply of each child that differs from the
//! cache, and deletion of an HPA that should no longer exist.
//!
//! A child whose cached copy already holds every field we set is not sent at
//! all: a converged operator makes no write requests.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

use super::error::is_not_found;
use super::observe::cached;
use super::{Context, Error, events, recent};
use crate::core::Children;
use crate::core::fingerprint::{ANNOTATION, stamp};
use crate::core::labels::MANAGER;
use crate::core::subset::is_subset;

/// Applies `children`; returns the Deployment as it is now.
pub async fn apply_children(
    ctx: &Context,
    owner: &ObjectReference,
    owner_uid: &str,
    children: &Children,
) -> Result<Deployment, Error> {
    let deployment = apply_one(ctx, owner, &ctx.stores.deployments, &children.deployment).await?;
    apply_one(ctx, owner, &ctx.stores.services, &children.service).await?;
    match &children.hpa {
        Some(hpa) => {
            apply_one(ctx, owner, &ctx.stores.hpas, hpa).await?;
        }
        None => delete_stale_hpa(ctx, owner, owner_uid, &children.deployment).await?,
    }
    Ok(deployment)
}

async fn apply_one<K>(
    ctx: &Context,
    owner: &ObjectReference,
    store: &Store<K>,
    desired: &K,
) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + 'static,
{
    let kind = K::kind(&());
    let (Some(name), Some(ns)) = (
        desired.meta().name.clone(),
        desired.meta().namespace.clone(),
    ) else {
        return Err(Error::MissingField("child name or namespace"));
    };
    let current = cached(store, &ns, &name);
    let mut desired_json = serde_json::to_value(desired).map_err(|source| Error::Serialize {
        what: "child",
        source,
    })?;
    stamp(&mut desired_json);
    let fingerprint = desired_json["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let key = recent::key(&kind, &ns, &name);
    let cached_rv = current
        .as_ref()
        .and_then(|c| c.meta().resource_version.clone());
    if ctx
        .applied
        .newer_than_cache(&key, cached_rv.as_deref())
        .as_deref()
        == Some(fingerprint.as_str())
    {
        // We applied exactly this a moment ago and the cache has not caught
        // up. Report the desired object (no status yet), never the stale
        // cached one, whose old status could claim the new spec is ready.
        ctx.metrics.child_write(&kind, "unchanged");
        return serde_json::from_value(desired_json).map_err(|source| Error::Serialize {
            what: "desired child",
            source,
        });
    }
    if let Some(cur) = &current {
        let cur_json = serde_json::to_value(cur.as_ref()).map_err(|source| Error::Serialize {
            what: "cached child",
            source,
        })?;
        if is_subset(&desired_json, &cur_json) {
            ctx.metrics.child_write(&kind, "unchanged");
            return Ok(cur.as_ref().clone());
        }
    }
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams::apply(MANAGER).force();
    let applied = api
        .patch(&name, &pp, &Patch::Apply(&desired_json))
        .await
        .map_err(|e| Error::kube(format!("applying {kind} {ns}/{name}"), e))?;
    ctx.applied.record(
        &key,
        applied.meta().resource_version.as_deref(),
        fingerprint,
    );
    let (reason, op) = if current.is_some() {
        ("Updated", "update")
    } else {
        ("Created", "create")
    };
    ctx.metrics.child_write(&kind, op);
    events::publish(
        ctx,
        owner,
        EventType::Normal,
        &format!("{kind}{reason}"),
        "Apply",
        format!("{reason} {kind} {name}"),
    )
    .await;
    Ok(applied)
}

/// Deletes the HPA named like the ModelService when autoscaling was removed,
/// but only one this ModelService controls: never someone else's HPA.
async fn delete_stale_hpa(
    ctx: &Context,
    owner: &ObjectReference,
    owner_uid: &str,
    dep: &Deployment,
) -> Result<(), Error> {
    let (Some(name), Some(ns)) = (
        dep.metadata.name.as_deref(),
        dep.metadata.namespace.as_deref(),
    ) else {
        return Err(Error::MissingField("child name or namespace"));
    };
    let Some(hpa) = cached(&ctx.stores.hpas, ns, name) else {
        return Ok(());
    };
    let ours = hpa
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == owner_uid && o.controller == Some(true));
    if !ours {
        return Ok(());
    }
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => {
            return Err(Error::kube(
                format!("deleting HorizontalPodAutoscaler {ns}/{name}"),
                e,
            ));
        }
    }
    ctx.metrics.child_write("HorizontalPodAutoscaler", "delete");
    events::publish(
        ctx,
        owner,
        EventType::Normal,
        "HorizontalPodAutoscalerDeleted",
        "Delete",
        format!("Deleted HorizontalPodAutoscaler {name}: autoscaling was removed from the spec"),
    )
    .await;
    Ok(())
}

/// Forgets our remembered applies of a deleted ModelService's children.
pub fn forget(ctx: &Context, namespace: &str, name: &str) {
    for kind in [
        Deployment::kind(&()),
        k8s_openapi::api::core::v1::Service::kind(&()),
        HorizontalPodAutoscaler::kind(&()),
    ] {
        ctx.applied.forget(&recent::key(&kind, namespace, name));
    }
}
