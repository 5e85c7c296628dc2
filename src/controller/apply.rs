//! Step 4, apply: server-side apply of each child that differs from the
//! cache, and deletion of the children the spec no longer asks for.
//!
//! A child whose cached copy already holds every field we set is not sent at
//! all: a converged operator makes no write requests.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource};
use tracing::warn;

use super::children::{
    self, Cached, Child, ClaimChild, ConfigMapChild, DeploymentChild, HpaChild, HttpRouteChild,
    InferencePoolChild, JobChild, LeaderWorkerSetChild, RoleBindingChild, RoleChild,
    ScaledObjectChild, ServiceAccountChild, ServiceChild,
};
use super::error::is_not_found;
use super::lean::{Lean, LeanDeployment};
use super::observe::cached;
use super::{Context, Error, recent};
use crate::core::endpoint_picker;
use crate::core::fingerprint::{ANNOTATION, stamp};
use crate::core::ownership;
use crate::core::subset::is_subset;
use crate::core::tracks;
use crate::core::{Children, PoolChildren, Pools};

/// The field manager of every write the operator makes: server-side apply
/// of children, status and finalizer patches. One manager, so that the
/// operator never conflicts with itself and a user sees one owner.
pub const FIELD_MANAGER: &str = "modelservice-operator";

/// A patch that is not a server-side apply (a merge or JSON patch), under
/// [`FIELD_MANAGER`]: without a name the API server records such a write's
/// manager as `unknown`, and nobody reading `managedFields` (a person, Argo
/// CD) can tell who made it.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// A create or replace under [`FIELD_MANAGER`] (see [`patch_params`]).
pub fn post_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..kube::api::PostParams::default()
    }
}

/// What one apply did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Unchanged,
    Created,
    Updated,
}

/// What the apply step leaves for the report step.
#[derive(Clone, Debug)]
pub struct Applied {
    /// The Deployment as it is now (lean: see `lean`), or the
    /// LeaderWorkerSet stated as one (see `groups`); none when the
    /// LeaderWorkerSet's API is gone.
    pub deployment: Option<LeanDeployment>,
    /// The ScaledObject, when KEDA scales: its conditions say whether KEDA acts.
    pub scaled_object: Option<Cached<ScaledObjectChild>>,
    /// The canary Deployment, while the spec has a canary.
    pub canary: Option<LeanDeployment>,
    /// The HTTPRoute, with a route and Gateway API served: its status says
    /// whether its Gateways accepted it.
    pub route: Option<Cached<HttpRouteChild>>,
    /// The InferencePools with their pickers' Deployments, with
    /// `route.backend: InferencePool` and the pool's API served.
    pub pools: Vec<AppliedPool>,
    /// Kinds the spec asks for whose API the cluster does not serve.
    pub unavailable: Vec<String>,
    /// The download Job of the spec's source, with a downloaded
    /// `model.source`: its status says whether the weights are in.
    pub job: Option<Cached<JobChild>>,
}

/// One InferencePool as applied (its status says whether its Gateways
/// accepted it) and its endpoint picker's Deployment.
#[derive(Clone, Debug)]
pub struct AppliedPool {
    pub pool: Cached<InferencePoolChild>,
    pub picker: LeanDeployment,
}

/// Applies `children` and deletes the ones no longer wanted.
///
/// With `repair` (the spec was already rolled out, so any write now puts
/// back what someone changed or deleted), one Event sums up what was put
/// back ("Updated Deployment m"): a person or GitOps tool whose edit is
/// reverted needs to see why. Writes that follow a spec change send no
/// Event: the status's Progressing condition says the same, and an Event
/// per created object was a fifth of the API writes of a cold start.
pub async fn apply_children(
    ctx: &Context,
    owner: &ObjectReference,
    owner_uid: &str,
    children: &Children,
    repair: bool,
) -> Result<Applied, Error> {
    let mut done = Vec::new();
    let result = apply_all(ctx, owner, owner_uid, children, &mut done).await;
    // Also after a failure: what was applied before it was applied.
    if let Some((reason, note)) = summary(&done).filter(|_| repair) {
        ctx.events.publish(
            owner,
            EventType::Normal,
            reason,
            "Apply",
            format!("{note}: it differed from the spec"),
        );
    }
    result
}

async fn apply_all(
    ctx: &Context,
    owner: &ObjectReference,
    owner_uid: &str,
    children: &Children,
    done: &mut Vec<Done>,
) -> Result<Applied, Error> {
    // Every child, by name: forget one here and this does not compile.
    let Children {
        deployment,
        groups,
        service,
        hpa,
        scaled_object,
        canary,
        canary_groups,
        stable_service,
        canary_service,
        route,
        pools,
        weights_claim,
        fetch,
    } = children;
    let (Some(name), Some(ns)) = (
        service.metadata.name.as_deref(),
        service.metadata.namespace.as_deref(),
    ) else {
        return Err(Error::MissingField("child name or namespace"));
    };
    let stale = Stale {
        ctx,
        owner,
        owner_uid,
        namespace: ns,
    };
    let job = apply_cache(
        &stale,
        name,
        weights_claim.as_deref(),
        fetch.as_deref(),
        done,
    )
    .await?;
    // An autoscaler the spec no longer wants goes before a new one is made:
    // two autoscalers never scale one Deployment at once.
    stale.remove::<HpaChild>(name, hpa.is_none()).await?;
    stale
        .remove::<ScaledObjectChild>(name, scaled_object.is_none())
        .await?;
    stale
        .remove::<HttpRouteChild>(name, route.is_none())
        .await?;

    // A canary that shrinks (held for the stable track's rollout: see
    // `core::canary_wait`) goes first, so that its waiting pods are gone
    // before the stable track frees a GPU they could take.
    let mut canary_applied = None;
    if let Some(c) = canary.as_ref().filter(|c| shrinks(ctx, c)) {
        let (applied, d) = apply_one::<DeploymentChild>(ctx, c).await?;
        done.push(d);
        canary_applied = Some(applied);
    }
    let mut unavailable = Vec::new();
    let (deployment, groups_applied) = match (deployment, groups) {
        (Some(deployment), _) => {
            hand_over_replicas::<DeploymentChild>(
                ctx,
                deployment,
                deployment.spec.replicas.is_some(),
            )
            .await?;
            let ((deployment, d), (_, s)) = futures::try_join!(
                apply_one::<DeploymentChild>(ctx, deployment),
                apply_one::<ServiceChild>(ctx, service),
            )?;
            done.extend([d, s]);
            if let Some(h) = hpa {
                wake_for_the_hpa::<DeploymentChild>(ctx, &deployment, h).await?;
            }
            (Some(deployment), None)
        }
        // Groups, or (the weights not in yet, nothing serving) no
        // workload at all: then only the Service. One apply of the Service
        // for both, as each apply site adds to this future's size.
        (None, groups) => {
            let mut applied = None;
            if let Some(g) = groups {
                if LeaderWorkerSetChild::cache(&ctx.stores).available() {
                    hand_over_replicas::<LeaderWorkerSetChild>(ctx, g, g.spec.replicas.is_some())
                        .await?;
                }
                applied =
                    apply_wanted::<LeaderWorkerSetChild>(ctx, Some(g), done, &mut unavailable)
                        .await?;
                if applied.is_none() {
                    // Its API answered 404: nothing else is written for a
                    // spec that cannot run (see `reconcile`).
                    return Ok(Applied {
                        deployment: None,
                        scaled_object: None,
                        canary: None,
                        route: None,
                        pools: Vec::new(),
                        unavailable,
                        job,
                    });
                }
            }
            done.push(apply_one::<ServiceChild>(ctx, service).await?.1);
            let state = applied
                .as_ref()
                .and_then(|g| super::groups::as_deployment(ctx, g));
            if let (Some(h), Some(state)) = (hpa, state.as_ref()) {
                wake_for_the_hpa::<LeaderWorkerSetChild>(ctx, state, h).await?;
            }
            (state, applied)
        }
    };
    // Switching between one pod and a group per replica: the workload of
    // the other shape serves until this one is ready, then goes.
    let replaced = super::groups::ready(deployment.as_ref());
    if groups_applied.is_some() {
        stale.remove::<DeploymentChild>(name, replaced).await?;
    } else {
        stale.remove::<LeaderWorkerSetChild>(name, replaced).await?;
    }
    apply_wanted::<HpaChild>(ctx, hpa.as_ref(), done, &mut unavailable).await?;
    let scaled_object =
        apply_wanted::<ScaledObjectChild>(ctx, scaled_object.as_deref(), done, &mut unavailable)
            .await?;
    let canary_name = tracks::canary_name(name);
    let canary = match (canary, canary_groups) {
        (Some(c), _) => {
            let applied = match canary_applied {
                Some(applied) => applied,
                None => {
                    let (applied, d) = apply_one::<DeploymentChild>(ctx, c).await?;
                    done.push(d);
                    applied
                }
            };
            for s in [stable_service, canary_service].into_iter().flatten() {
                done.push(apply_one::<ServiceChild>(ctx, s).await?.1);
            }
            // A canary of the other shape is only a canary: it goes.
            stale
                .remove::<LeaderWorkerSetChild>(&canary_name, true)
                .await?;
            Some(applied)
        }
        (None, Some(g)) => {
            let (applied, d) = apply_one::<LeaderWorkerSetChild>(ctx, g).await?;
            done.push(d);
            for s in [stable_service, canary_service].into_iter().flatten() {
                done.push(apply_one::<ServiceChild>(ctx, s).await?.1);
            }
            stale.remove::<DeploymentChild>(&canary_name, true).await?;
            super::groups::as_deployment(ctx, &applied)
        }
        (None, None) => {
            // Promotion: the canary serves until the stable track has
            // rolled out the spec it was promoted to, so capacity never dips.
            let stable_done = super::groups::ready(deployment.as_ref());
            let stable_name = tracks::stable_service_name(name);
            stale
                .remove::<DeploymentChild>(&canary_name, stable_done)
                .await?;
            stale
                .remove::<LeaderWorkerSetChild>(&canary_name, stable_done)
                .await?;
            stale
                .remove::<ServiceChild>(&canary_name, stable_done)
                .await?;
            stale
                .remove::<ServiceChild>(&stable_name, stable_done)
                .await?;
            None
        }
    };
    let pool_api = InferencePoolChild::cache(&ctx.stores).available();
    let (route, pools) = match pools {
        // Without the pool's API, neither the pickers nor a route to a
        // pool that cannot exist: a route already there keeps serving.
        Some(_) if !pool_api => {
            unavailable.push(crate::api::inference::KIND.to_string());
            (None, Vec::new())
        }
        Some(p) => {
            let applied = apply_pools(ctx, p, done, &mut unavailable).await?;
            // A pool answered 404: its API went away in between.
            let route = if applied.is_empty() {
                None
            } else {
                apply_wanted::<HttpRouteChild>(ctx, route.as_deref(), done, &mut unavailable)
                    .await?
            };
            (route, applied)
        }
        None => (
            apply_wanted::<HttpRouteChild>(ctx, route.as_deref(), done, &mut unavailable).await?,
            Vec::new(),
        ),
    };
    // Pools go once the route no longer sends to them.
    remove_stale_pools(&stale, name, pools_wanted(children)).await?;
    Ok(Applied {
        deployment,
        scaled_object,
        canary,
        route,
        pools,
        unavailable,
        job,
    })
}

/// The weights cache: the claim, then the spec's download Job, created
/// once and never changed (a Job's pod template cannot change, and an
/// operator upgrade that changed the fetch image must not fail every
/// ModelService). Jobs of sources the spec no longer names go, and the
/// claim goes with the last downloaded source.
///
/// Made out of line, on the heap: in a debug build the frame that makes a
/// future keeps room for it while everything below it runs, and this one
/// would add to every reconcile's deepest stack, cached model or not.
#[inline(never)]
fn apply_cache<'a>(
    stale: &'a Stale<'a>,
    name: &'a str,
    claim: Option<&'a PersistentVolumeClaim>,
    job: Option<&'a Job>,
    done: &'a mut Vec<Done>,
) -> futures::future::BoxFuture<'a, Result<Option<Cached<JobChild>>, Error>> {
    Box::pin(apply_cache_now(stale, name, claim, job, done))
}

async fn apply_cache_now(
    stale: &Stale<'_>,
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
    job: Option<&Job>,
    done: &mut Vec<Done>,
) -> Result<Option<Cached<JobChild>>, Error> {
    let ctx = stale.ctx;
    let ns = stale.namespace;
    let jobs = &JobChild::cache(&ctx.stores).store;
    let wanted_job = job.and_then(|j| j.metadata.name.clone());
    let old: Vec<String> = jobs
        .state()
        .iter()
        .filter(|j| j.meta().namespace.as_deref() == Some(ns))
        .filter(|j| {
            j.meta()
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == stale.owner_uid && o.controller == Some(true))
        })
        .filter_map(|j| j.meta().name.clone())
        .filter(|n| Some(n) != wanted_job.as_ref())
        .collect();
    for n in old {
        stale.remove::<JobChild>(&n, true).await?;
    }
    let claim_name = crate::core::weights::claim_name(name);
    let Some(claim) = claim else {
        stale.remove::<ClaimChild>(&claim_name, true).await?;
        return Ok(None);
    };
    let mut claim = claim.clone();
    if let Some(current) = cached(&ClaimChild::cache(&ctx.stores).store, ns, &claim_name) {
        crate::core::weights::keep_immutable(&mut claim, current.spec_value().as_ref());
    }
    done.push(apply_one::<ClaimChild>(ctx, &claim).await?.1);
    let Some(job) = job else {
        return Ok(None);
    };
    let job_name = job.metadata.name.as_deref().unwrap_or_default();
    if let Some(current) = cached(jobs, ns, job_name) {
        return Ok(Some(current.as_ref().clone()));
    }
    let (applied, d) = apply_one::<JobChild>(ctx, job).await?;
    done.push(d);
    Ok(Some(applied))
}

/// Which of one ModelService's pools the spec wants: (stable, canary).
fn pools_wanted(children: &Children) -> (bool, bool) {
    let p = children.pools.as_ref();
    (p.is_some(), p.is_some_and(|p| p.canary.is_some()))
}

/// The endpoint pickers' shared objects, then each pool's picker and the
/// pool itself. Empty when the pool's API answered 404.
async fn apply_pools(
    ctx: &Context,
    pools: &Pools,
    done: &mut Vec<Done>,
    unavailable: &mut Vec<String>,
) -> Result<Vec<AppliedPool>, Error> {
    let Pools {
        stable,
        canary,
        service_account,
        role,
        role_binding,
        config,
    } = pools;
    done.push(
        apply_one::<ServiceAccountChild>(ctx, service_account)
            .await?
            .1,
    );
    done.push(apply_one::<RoleChild>(ctx, role).await?.1);
    done.push(apply_one::<RoleBindingChild>(ctx, role_binding).await?.1);
    done.push(apply_one::<ConfigMapChild>(ctx, config).await?.1);
    let mut applied = Vec::new();
    for one in std::iter::once(stable).chain(canary) {
        let PoolChildren {
            pool,
            picker,
            picker_service,
        } = one;
        let (picker, d) = apply_one::<DeploymentChild>(ctx, picker).await?;
        done.push(d);
        done.push(apply_one::<ServiceChild>(ctx, picker_service).await?.1);
        match apply_wanted::<InferencePoolChild>(ctx, Some(pool), done, unavailable).await? {
            Some(pool) => applied.push(AppliedPool { pool, picker }),
            None => return Ok(Vec::new()),
        }
    }
    Ok(applied)
}

/// Deletes the pools, pickers and picker objects the spec no longer wants:
/// all of them without `route.backend: InferencePool`, the canary's without
/// a canary.
async fn remove_stale_pools(
    stale: &Stale<'_>,
    name: &str,
    (stable, canary): (bool, bool),
) -> Result<(), Error> {
    let canary_pool = tracks::canary_name(name);
    for (pool, wanted) in [(name, stable), (canary_pool.as_str(), canary)] {
        let picker = endpoint_picker::picker_name(pool);
        stale.remove::<InferencePoolChild>(pool, !wanted).await?;
        stale.remove::<DeploymentChild>(&picker, !wanted).await?;
        stale.remove::<ServiceChild>(&picker, !wanted).await?;
    }
    let shared = endpoint_picker::shared_name(name);
    stale.remove::<RoleBindingChild>(&shared, !stable).await?;
    stale.remove::<RoleChild>(&shared, !stable).await?;
    stale
        .remove::<ServiceAccountChild>(&shared, !stable)
        .await?;
    stale.remove::<ConfigMapChild>(&shared, !stable).await?;
    Ok(())
}

/// Whether `desired` asks for fewer replicas than its cached copy has.
fn shrinks(ctx: &Context, desired: &Deployment) -> bool {
    let (Some(ns), Some(name)) = (
        desired.metadata.namespace.as_deref(),
        desired.metadata.name.as_deref(),
    ) else {
        return false;
    };
    let current = cached(&ctx.stores.deployments.store, ns, name)
        .and_then(|d| d.state().replicas)
        .unwrap_or(0);
    desired.spec.replicas.is_some_and(|want| want < current)
}

/// Applies an optional child when the spec wants it and its API is served;
/// notes it in `unavailable` when the API is missing.
async fn apply_wanted<C: Child>(
    ctx: &Context,
    desired: Option<&C::Object>,
    done: &mut Vec<Done>,
    unavailable: &mut Vec<String>,
) -> Result<Option<Cached<C>>, Error> {
    let Some(desired) = desired else {
        return Ok(None);
    };
    let cache = C::cache(&ctx.stores);
    if !cache.available() {
        unavailable.push(C::Object::kind(&()).into_owned());
        return Ok(None);
    }
    match apply_one::<C>(ctx, desired).await {
        Ok((applied, d)) => {
            done.push(d);
            Ok(Some(applied))
        }
        // Discovery is a prediction too: an apply answered 404 proves the
        // kind gone now (its CRD deleted), and status says so in this
        // reconcile rather than at the next discovery.
        Err(e) if C::OPTIONAL && e.is_not_found() => {
            if cache.refute() {
                warn!(kind = %C::Object::kind(&()), error = %e, "optional API gone: an apply answered 404");
            }
            unavailable.push(C::Object::kind(&()).into_owned());
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// One child's entry in the summary Event: what happened, its kind, its name.
type Done = (Outcome, String, String);

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
/// what it did. The cache and the apply response are both lean:
/// only metadata, spec and (for the Deployment) status are decoded.
async fn apply_one<C: Child>(
    ctx: &Context,
    desired: &C::Object,
) -> Result<(Cached<C>, Done), Error> {
    let cache = C::cache(&ctx.stores);
    let kind = C::Object::kind(&());
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
    let remembered = ctx
        .applied
        .newer_than_cache(&key, cached_rv.as_deref(), &cache.fresh);
    if remembered.as_deref() == Some(fingerprint.as_str()) {
        // We applied exactly this a moment ago and the cache has not caught
        // up. Report the desired object (no status yet), never the stale
        // cached one, whose old status could claim the new spec is ready.
        ctx.metrics.child_write(&kind, "unchanged");
        let desired = Lean::from_desired(&desired_json).map_err(|source| Error::Serialize {
            what: "desired child",
            source,
        })?;
        return Ok((desired, (Outcome::Unchanged, kind.into_owned(), name)));
    }
    let api: Api<Cached<C>> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(cur) = &current {
        ours::<C>(desired, Some(cur.meta()))?;
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
            return Ok((
                cur.as_ref().clone(),
                (Outcome::Unchanged, kind.into_owned(), name),
            ));
        }
    }
    // Only the text of the desired object goes on from here. A reconcile
    // waits on the API server below, and in a rollout every running one does
    // at once: the parsed tree is several times the size of its text.
    let body =
        serde_json::value::to_raw_value(&desired_json).map_err(|source| Error::Serialize {
            what: "child",
            source,
        })?;
    drop(desired_json);
    if current.is_none() {
        ensure_ours_uncached::<C>(&api, desired).await?;
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api
        .patch(&name, &pp, &Patch::Apply(&*body))
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
    ctx.echoes.wrote(&key, rv);
    let (outcome, op) = if current.is_some() {
        (Outcome::Updated, "update")
    } else {
        (Outcome::Created, "create")
    };
    ctx.metrics.child_write(&kind, op);
    Ok((applied, (outcome, kind.into_owned(), name)))
}

/// Fails with a conflict unless the object named like `desired` is ours to
/// write: controlled by the owner `desired` names, or absent. The caches
/// hold only objects we labelled, so one they lack may still exist (made by
/// someone else, or by us a moment ago): its metadata is looked up (a quorum
/// read: the watch cache could still miss an object made a moment ago).
/// Costs one GET per child the operator is about to create, or that the
/// cache has not caught up with. An object made between that GET and our
/// apply would still be taken; the window is one round trip.
///
/// Our own recent write of that name is no proof it is ours to write: it
/// may have been another ModelService's child (the canary of `pair` is the
/// Deployment `pair-canary`, the name of ModelService `pair-canary`'s own).
/// Taking that shortcut while the cache lagged let `pair-canary`'s apply
/// take over `pair`'s canary (one field manager for both), a child of
/// another ModelService.
async fn ensure_ours_uncached<C: Child>(
    api: &Api<Cached<C>>,
    desired: &C::Object,
) -> Result<(), Error> {
    let kind = C::Object::kind(&());
    let name = desired.meta().name.as_deref().unwrap_or_default();
    // Metadata only: the owner references are all it needs, and the API
    // server then encodes no spec.
    let found = api
        .get_metadata_opt(name)
        .await
        .map_err(|e| Error::kube(format!("looking up {kind} {name}"), e))?;
    ours::<C>(desired, found.as_ref().map(|o| &o.metadata))
}

/// Fails with a conflict unless `found`, the object named like `desired`
/// (`None`: there is none), is ours to write.
fn ours<C: Child>(desired: &C::Object, found: Option<&kube::api::ObjectMeta>) -> Result<(), Error> {
    let kind = C::Object::kind(&());
    let owner = ownership::controller_uid(desired.meta()).unwrap_or_default();
    match found.and_then(|m| ownership::check(&kind, m, owner)) {
        Some(conflict) => Err(conflict.into()),
        None => Ok(()),
    }
}

/// The field manager that keeps `spec.replicas` at its current value while
/// the operator's own manager lets go of it.
pub const HANDOVER_MANAGER: &str = "modelservice-operator-handover";

/// Turning autoscaling on: the Deployment (or LeaderWorkerSet: row `C`)
/// about to be applied leaves out
/// `spec.replicas` (the autoscaler owns it), while our manager still owns the
/// field. A server-side apply that drops a field its manager alone owned
/// removes it, and the API server then defaults it to 1: a 3-replica model
/// would fall to 1 until the autoscaler acts, and with a slow or broken
/// metrics pipeline it never does. So first a second manager applies the
/// current count; the main apply then releases the field while the value
/// stays, and the autoscaler's first write takes the field over. Costs one
/// request, once per switch, and nothing while autoscaling stays on (our
/// manager no longer owns the field).
async fn hand_over_replicas<C: Child>(
    ctx: &Context,
    desired: &C::Object,
    wants_replicas: bool,
) -> Result<(), Error> {
    let (Some(name), Some(ns)) = (
        desired.meta().name.as_deref(),
        desired.meta().namespace.as_deref(),
    ) else {
        return Ok(());
    };
    if wants_replicas {
        return Ok(());
    }
    let cache = C::cache(&ctx.stores);
    let kind = C::Object::kind(&());
    let api: Api<Cached<C>> = Api::namespaced(ctx.client.clone(), ns);
    // The count to keep must be the live one. A cache that has not seen
    // the object, or not our latest write to it, would hand over a stale
    // count or none (then the main apply drops the field and the server
    // defaults it to 1): read it once instead. That happens only right
    // after a write of ours, so a settled object costs nothing.
    let cached_one = cached(&cache.store, ns, name);
    let key = recent::key(&kind, ns, name);
    let cached_rv = cached_one
        .as_ref()
        .and_then(|d| d.meta().resource_version.clone());
    let behind = cached_one.is_none()
        || ctx
            .applied
            .newer_than_cache(&key, cached_rv.as_deref(), &cache.fresh)
            .is_some();
    let current = if behind {
        match api.get_opt(name).await {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(Error::kube(
                    format!("reading {kind} {ns}/{name} before handing over replicas"),
                    e,
                ));
            }
        }
    } else {
        match cached_one {
            Some(d) => d.as_ref().clone(),
            None => return Ok(()),
        }
    };
    let Some(replicas) = current.spec_replicas().filter(|_| current.owns_replicas) else {
        return Ok(());
    };
    write_replicas::<C>(ctx, ns, name, replicas, "handing over replicas of").await
}

/// Writes the replica count as [`HANDOVER_MANAGER`], a manager of its own,
/// so that our main apply may leave the field out while the value stays,
/// and an autoscaler's first write takes the field over.
async fn write_replicas<C: Child>(
    ctx: &Context,
    ns: &str,
    name: &str,
    replicas: i32,
    doing: &str,
) -> Result<(), Error> {
    let kind = C::Object::kind(&());
    let count = serde_json::json!({
        "apiVersion": C::Object::api_version(&()), "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas},
    });
    Api::<Cached<C>>::namespaced(ctx.client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply(HANDOVER_MANAGER).force(),
            &Patch::Apply(&count),
        )
        .await
        .map_err(|e| Error::kube(format!("{doing} {kind} {ns}/{name}"), e))?;
    ctx.metrics.child_write(&kind, "handover");
    Ok(())
}

/// Switching from KEDA at zero replicas to the HPA: a HorizontalPodAutoscaler
/// does nothing to a Deployment (or a LeaderWorkerSet, row `C`) at 0 replicas (Kubernetes reads 0 as
/// "autoscaling disabled"), and KEDA leaves the count where it was when its
/// ScaledObject goes. Without this the model stayed at zero for good, its
/// status "0/0 replicas ready". So, only while the HPA does not exist yet
/// (a later scale to 0 by hand is someone's decision, never reverted), the
/// count becomes the HPA's minimum, written as the handover manager so that
/// the HPA's first write takes the field over.
async fn wake_for_the_hpa<C: Child>(
    ctx: &Context,
    deployment: &LeanDeployment,
    hpa: &k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
) -> Result<(), Error> {
    let (Some(name), Some(ns)) = (
        deployment.meta().name.as_deref(),
        deployment.meta().namespace.as_deref(),
    ) else {
        return Ok(());
    };
    if deployment.state().replicas != Some(0) {
        return Ok(());
    }
    let cache = HpaChild::cache(&ctx.stores);
    let key = recent::key(&<HpaChild as Child>::Object::kind(&()), ns, name);
    let hpa_exists = cached(&cache.store, ns, name).is_some()
        || ctx
            .applied
            .newer_than_cache(&key, None, &cache.fresh)
            .is_some();
    if hpa_exists {
        return Ok(());
    }
    let min = hpa.spec.min_replicas.unwrap_or(1).max(1);
    write_replicas::<C>(ctx, ns, name, min, "waking for the HPA").await
}

/// Where the children of one ModelService live, for deleting stale ones.
struct Stale<'a> {
    ctx: &'a Context,
    owner: &'a ObjectReference,
    owner_uid: &'a str,
    namespace: &'a str,
}

impl Stale<'_> {
    /// Deletes the child of row `C` named `name` when it is `unwanted`, but
    /// only one this ModelService controls: never someone else's object of
    /// that name.
    ///
    /// A child we created a moment ago may not be in the cache yet; our
    /// remembered write says it exists. Without that, a switch of engine
    /// right after the HPA was made left the HPA and the new ScaledObject
    /// scaling one Deployment until the HPA's watch event came. The write
    /// may have been for another ModelService's child of that name, so the
    /// object is then read and its controller checked.
    async fn remove<C: Child>(&self, name: &str, unwanted: bool) -> Result<(), Error> {
        let cache = C::cache(&self.ctx.stores);
        if !unwanted || !C::DELETED_WHEN_UNWANTED || !cache.available() {
            return Ok(());
        }
        let ns = self.namespace;
        let kind = C::Object::kind(&());
        let key = recent::key(&kind, ns, name);
        let api: Api<Cached<C>> = Api::namespaced(self.ctx.client.clone(), ns);
        let controlled_by_us = |meta: &kube::api::ObjectMeta| {
            meta.owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == self.owner_uid && o.controller == Some(true))
        };
        let ours = match cached(&cache.store, ns, name) {
            Some(child) => controlled_by_us(child.meta()),
            None if self
                .ctx
                .applied
                .newer_than_cache(&key, None, &cache.fresh)
                .is_some() =>
            {
                match api.get_opt(name).await {
                    Ok(found) => found.is_some_and(|o| controlled_by_us(o.meta())),
                    Err(e) => return Err(Error::kube(format!("looking up {kind} {ns}/{name}"), e)),
                }
            }
            None => false,
        };
        if !ours {
            return Ok(());
        }
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::kube(format!("deleting {kind} {ns}/{name}"), e)),
        }
        forget_child(self.ctx, &key);
        self.ctx.metrics.child_write(&kind, "delete");
        self.ctx.events.publish(
            self.owner,
            EventType::Normal,
            &format!("{kind}Deleted"),
            "Delete",
            format!("Deleted {kind} {name}: the spec no longer asks for it"),
        );
        Ok(())
    }
}

/// Forgets our remembered applies of a deleted ModelService's children,
/// under each name a child may have.
pub fn forget(ctx: &Context, namespace: &str, name: &str) {
    let names = [
        name.to_string(),
        tracks::canary_name(name),
        tracks::stable_service_name(name),
        endpoint_picker::picker_name(name),
        endpoint_picker::picker_name(&tracks::canary_name(name)),
    ];
    for kind in children::kinds() {
        for n in &names {
            forget_child(ctx, &recent::key(&kind, namespace, n));
        }
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
