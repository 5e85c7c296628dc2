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
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

use super::error::is_not_found;
use super::lean::{Lean, LeanDeployment};
use super::observe::cached;
use super::{Cache, Context, Error, recent};
use crate::core::Children;
use crate::core::fingerprint::{ANNOTATION, stamp};
use crate::core::labels::MANAGER;
use crate::core::subset::is_subset;

/// What one apply did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Unchanged,
    Created,
    Updated,
}

/// Applies `children`; returns the Deployment as it is now (lean: see `lean`).
///
/// One Event sums up what a reconcile changed ("Created Deployment m,
/// Service m"): one write for the API server instead of one per child.
pub async fn apply_children(
    ctx: &Context,
    owner: &ObjectReference,
    owner_uid: &str,
    children: &Children,
) -> Result<LeanDeployment, Error> {
    let mut done = Vec::new();
    let result = apply_all(ctx, owner, owner_uid, children, &mut done).await;
    // Also after a failure: what was applied before it was applied.
    if let Some((reason, note)) = summary(&done) {
        ctx.events
            .publish(owner, EventType::Normal, reason, "Apply", note);
    }
    result
}

async fn apply_all(
    ctx: &Context,
    owner: &ObjectReference,
    owner_uid: &str,
    children: &Children,
    done: &mut Vec<(Outcome, String, String)>,
) -> Result<LeanDeployment, Error> {
    hand_over_replicas(ctx, &children.deployment).await?;
    let deployment = apply_one(ctx, &ctx.stores.deployments, &children.deployment, done).await?;
    apply_one(ctx, &ctx.stores.services, &children.service, done).await?;
    match &children.hpa {
        Some(hpa) => {
            apply_one(ctx, &ctx.stores.hpas, hpa, done).await?;
        }
        None => delete_stale_hpa(ctx, owner, owner_uid, &children.deployment).await?,
    }
    Ok(deployment)
}

/// The Event for what one reconcile applied: reason `Created` when any child
/// is new, `Updated` otherwise; none when nothing was sent.
fn summary(done: &[(Outcome, String, String)]) -> Option<(&'static str, String)> {
    let changed: Vec<String> = done
        .iter()
        .filter(|(o, _, _)| *o != Outcome::Unchanged)
        .map(|(o, kind, name)| {
            let verb = if *o == Outcome::Created {
                "created"
            } else {
                "updated"
            };
            format!("{verb} {kind} {name}")
        })
        .collect();
    if changed.is_empty() {
        return None;
    }
    let reason = if done.iter().any(|(o, _, _)| *o == Outcome::Created) {
        "Created"
    } else {
        "Updated"
    };
    let mut note = changed.join(", ");
    if let Some(first) = note.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    Some((reason, note))
}

/// Applies `desired` unless the cached copy already holds it, and notes
/// what it did in `done`. The cache and the apply response are both lean:
/// only metadata, spec and (for the Deployment) status are decoded.
async fn apply_one<K, S>(
    ctx: &Context,
    cache: &Cache<Lean<K, S>>,
    desired: &K,
    done: &mut Vec<(Outcome, String, String)>,
) -> Result<Lean<K, S>, Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope> + Serialize + 'static,
    S: Clone + Debug + DeserializeOwned + 'static,
{
    let kind = K::kind(&());
    let (Some(name), Some(ns)) = (
        desired.meta().name.clone(),
        desired.meta().namespace.clone(),
    ) else {
        return Err(Error::MissingField("child name or namespace"));
    };
    let current = cached(&cache.store, &ns, &name);
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
        .newer_than_cache(&key, cached_rv.as_deref(), &cache.fresh)
        .as_deref()
        == Some(fingerprint.as_str())
    {
        // We applied exactly this a moment ago and the cache has not caught
        // up. Report the desired object (no status yet), never the stale
        // cached one, whose old status could claim the new spec is ready.
        ctx.metrics.child_write(&kind, "unchanged");
        let desired = Lean::from_desired(&desired_json).map_err(|source| Error::Serialize {
            what: "desired child",
            source,
        })?;
        done.push((Outcome::Unchanged, kind.into_owned(), name));
        return Ok(desired);
    }
    if let Some(cur) = &current {
        // A child stamped with another fingerprint cannot hold the desired
        // object (the stamp is part of it): no need to compare the rest.
        let stamped = cur.annotation(ANNOTATION).as_deref() == Some(fingerprint.as_str());
        let holds = stamped
            && (ctx.verified.holds(&key, cached_rv.as_deref(), &fingerprint) || {
                let cur_json = cur.to_json().map_err(|source| Error::Serialize {
                    what: "cached child",
                    source,
                })?;
                is_subset(&desired_json, &cur_json)
            });
        if holds {
            ctx.verified
                .remember(&key, cached_rv.as_deref(), &fingerprint);
            ctx.metrics.child_write(&kind, "unchanged");
            done.push((Outcome::Unchanged, kind.into_owned(), name));
            return Ok(cur.as_ref().clone());
        }
    }
    let api: Api<Lean<K, S>> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams::apply(MANAGER).force();
    let applied = api
        .patch(&name, &pp, &Patch::Apply(&desired_json))
        .await
        .map_err(|e| Error::kube(format!("applying {kind} {ns}/{name}"), e))?;
    // The child as our apply left it counts as holding what we applied,
    // without a comparison. Where the server stores a field differently
    // (a quantity in canonical form, a mutating webhook's rewrite), we do not
    // re-apply on every reconcile and fight it; any later write by someone
    // else moves the resourceVersion and brings the comparison back. After a
    // restart such a child is compared, differs, and is applied once.
    let rv = applied.meta().resource_version.as_deref();
    ctx.verified.remember(&key, rv, &fingerprint);
    ctx.applied.record(&key, rv, fingerprint);
    let (outcome, op) = if current.is_some() {
        (Outcome::Updated, "update")
    } else {
        (Outcome::Created, "create")
    };
    ctx.metrics.child_write(&kind, op);
    done.push((outcome, kind.into_owned(), name));
    Ok(applied)
}

/// The field manager that keeps `spec.replicas` at its current value while
/// the operator's own manager lets go of it.
pub const HANDOVER_MANAGER: &str = "modelservice-operator-handover";

/// Turning autoscaling on: the Deployment about to be applied leaves out
/// `spec.replicas` (the autoscaler owns it), while our manager still owns the
/// field. A server-side apply that drops a field its manager alone owned
/// removes it, and the API server then defaults it to 1: a 3-replica model
/// would fall to 1 until the autoscaler acts, and with a slow or broken
/// metrics pipeline it never does. So first a second manager applies the
/// current count; the main apply then releases the field while the value
/// stays, and the autoscaler's first write takes the field over. Costs one
/// request, once per switch, and nothing while autoscaling stays on (our
/// manager no longer owns the field).
async fn hand_over_replicas(ctx: &Context, desired: &Deployment) -> Result<(), Error> {
    let (Some(name), Some(ns)) = (
        desired.meta().name.as_deref(),
        desired.meta().namespace.as_deref(),
    ) else {
        return Ok(());
    };
    let wants_replicas = desired.spec.replicas.is_some();
    if wants_replicas {
        return Ok(());
    }
    let api: Api<LeanDeployment> = Api::namespaced(ctx.client.clone(), ns);
    // The count to keep must be the live one. A cache that has not seen
    // the Deployment, or not our latest write to it, would hand over a
    // stale count or none (then the main apply drops the field and the
    // server defaults it to 1): read it once instead. That happens only
    // right after a write of ours, so a settled object costs nothing.
    let cached_dep = cached(&ctx.stores.deployments.store, ns, name);
    let key = recent::key("Deployment", ns, name);
    let cached_rv = cached_dep
        .as_ref()
        .and_then(|d| d.meta().resource_version.clone());
    let behind = cached_dep.is_none()
        || ctx
            .applied
            .newer_than_cache(&key, cached_rv.as_deref(), &ctx.stores.deployments.fresh)
            .is_some();
    let current = if behind {
        match api.get_opt(name).await {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(Error::kube(
                    format!("reading Deployment {ns}/{name} before handing over replicas"),
                    e,
                ));
            }
        }
    } else {
        match cached_dep {
            Some(d) => d.as_ref().clone(),
            None => return Ok(()),
        }
    };
    let Some(replicas) = current.state().replicas.filter(|_| current.owns_replicas) else {
        return Ok(());
    };
    let keep = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas},
    });
    api.patch(
        name,
        &PatchParams::apply(HANDOVER_MANAGER).force(),
        &Patch::Apply(&keep),
    )
    .await
    .map_err(|e| {
        Error::kube(
            format!("handing over replicas of Deployment {ns}/{name}"),
            e,
        )
    })?;
    ctx.metrics.child_write("Deployment", "handover");
    Ok(())
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
    let Some(hpa) = cached(&ctx.stores.hpas.store, ns, name) else {
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
    forget_child(
        ctx,
        &recent::key(&HorizontalPodAutoscaler::kind(&()), ns, name),
    );
    ctx.metrics.child_write("HorizontalPodAutoscaler", "delete");
    ctx.events.publish(
        owner,
        EventType::Normal,
        "HorizontalPodAutoscalerDeleted",
        "Delete",
        format!("Deleted HorizontalPodAutoscaler {name}: autoscaling was removed from the spec"),
    );
    Ok(())
}

/// Forgets our remembered applies of a deleted ModelService's children.
pub fn forget(ctx: &Context, namespace: &str, name: &str) {
    for kind in [
        Deployment::kind(&()),
        k8s_openapi::api::core::v1::Service::kind(&()),
        HorizontalPodAutoscaler::kind(&()),
    ] {
        forget_child(ctx, &recent::key(&kind, namespace, name));
    }
}

/// Forgets what we remembered of one child.
fn forget_child(ctx: &Context, key: &str) {
    ctx.applied.forget(key);
    ctx.verified.forget(key);
}

#[cfg(test)]
mod tests {
    use super::{Outcome, summary};

    fn d(o: Outcome, kind: &str) -> (Outcome, String, String) {
        (o, kind.into(), "m".into())
    }

    #[test]
    fn one_event_names_every_child_written() {
        let done = [
            d(Outcome::Created, "Deployment"),
            d(Outcome::Created, "Service"),
        ];
        assert_eq!(
            summary(&done),
            Some(("Created", "Created Deployment m, created Service m".into()))
        );
    }

    #[test]
    fn an_update_alone_is_updated_and_unchanged_children_are_not_named() {
        let done = [
            d(Outcome::Updated, "Deployment"),
            d(Outcome::Unchanged, "Service"),
        ];
        assert_eq!(
            summary(&done),
            Some(("Updated", "Updated Deployment m".into()))
        );
        let mixed = [
            d(Outcome::Updated, "Deployment"),
            d(Outcome::Created, "HorizontalPodAutoscaler"),
        ];
        assert_eq!(summary(&mixed).map(|s| s.0), Some("Created"));
    }

    #[test]
    fn nothing_sent_means_no_event() {
        assert_eq!(summary(&[d(Outcome::Unchanged, "Deployment")]), None);
        assert_eq!(summary(&[]), None);
    }
}
