//! The surge decision's I/O (see `core::surge`): which decision the desired
//! Deployment carries, and the one read of nodes and pods when a rollout
//! starts.
//!
//! The decision is looked for where it costs nothing first: our own recent
//! decision (the cache may not show our write yet), then the cached
//! Deployment's annotation, then the cached Deployment's fingerprint. Only a
//! pod template that really changes on an existing Deployment reads the
//! cluster: one node list and one pod list, paged, with no cache kept, so a
//! settled operator pays nothing for this feature.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::ListParams;
use kube::runtime::events::EventType;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::info;

use super::lean::LeanDeployment;
use super::observe::cached;
use super::{Context, recent};
use crate::api::{RolloutStrategy, Surge};
use crate::core::ValidSpec;
use crate::core::fingerprint;
use crate::core::subset::is_subset;
use crate::core::surge::{self, Decision, Demand, Plan, Seen};

/// Pods that hold their resources: a finished pod's are free again.
pub const ACTIVE_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Items per list page: a large cluster's pods are read a page at a time and
/// reduced to per-node sums, never held all at once.
const PAGE: u32 = 500;

/// Stamps the desired Deployment with its surge decision, taking one when a
/// rollout starts; `None` (the Deployment as built) when there is no
/// decision to carry: surge Never, Recreate, a new Deployment or an
/// unchanged template. Never fails: a cluster that cannot be read means
/// replace, and the message says why.
pub async fn settle(
    ctx: &Context,
    v: &ValidSpec,
    owner: &ObjectReference,
    desired: &mut Deployment,
) -> Option<Decision> {
    let rollout = &v.spec.rollout;
    if rollout.strategy != RolloutStrategy::RollingUpdate || rollout.surge() != Surge::Auto {
        return None;
    }
    let (ns, name) = (v.namespace.as_str(), v.name.as_str());
    let template = surge::template_hash(desired);
    let current = cached(&ctx.stores.deployments.store, ns, name);
    let cached_rv = current
        .as_ref()
        .and_then(|c| c.meta().resource_version.clone());
    let recent = ctx.decisions.newer_than_cache(
        &key(ns, name),
        cached_rv.as_deref(),
        &ctx.stores.deployments.fresh,
    );
    let seen = Seen {
        exists: current.is_some(),
        decision: current.as_deref().and_then(on),
    };
    let changes = || {
        current
            .as_ref()
            .is_none_or(|c| template_changes(desired, c))
    };
    let decision = match surge::plan(&template, recent.as_ref(), seen, changes) {
        Plan::Nothing => return None,
        Plan::Keep(d) => d,
        Plan::Decide => {
            let d = decide(ctx, &template, &Demand::of(v)).await;
            ctx.metrics.surge_decision(d.surge);
            info!(surge = d.surge, message = %d.message, "rollout starts");
            let reason = if d.surge { "Surging" } else { "Replacing" };
            ctx.events.publish(
                owner,
                EventType::Normal,
                reason,
                "Rollout",
                format!("Rollout of a new pod template: {}", d.message),
            );
            d
        }
    };
    surge::stamp(desired, &decision);
    Some(decision)
}

/// Remembers the decision the apply wrote, until the cache shows it (see
/// `recent`), and hands the applied Deployment on. A reconcile in between
/// would otherwise see the old template and decide again, from a cluster
/// where the surge pod already holds the free GPU.
pub fn remembered(
    ctx: &Context,
    decision: Option<Decision>,
    applied: LeanDeployment,
) -> LeanDeployment {
    let meta = applied.meta();
    if let (Some(decision), Some(ns), Some(name)) =
        (decision, meta.namespace.as_deref(), meta.name.as_deref())
    {
        ctx.decisions
            .record(&key(ns, name), meta.resource_version.as_deref(), decision);
    }
    applied
}

/// The decision a Deployment carries, for its rollout's Progressing message.
pub fn on(deployment: &LeanDeployment) -> Option<Decision> {
    Decision::decode(&deployment.annotation(surge::ANNOTATION)?)
}

/// The key of a Deployment's decision in `Context::decisions`.
pub fn key(namespace: &str, name: &str) -> String {
    recent::key("Deployment", namespace, name)
}

/// Reads the cluster and decides; a read that fails decides replace.
async fn decide(ctx: &Context, template: &str, demand: &Demand<'_>) -> Decision {
    let mut nodes: Vec<Node> = Vec::new();
    if let Err(why) = each_page(ctx, ListParams::default(), |page| nodes.extend(page)).await {
        return surge::unreadable(template, demand, &format!("listing nodes: {why}"));
    }
    let mut used = BTreeMap::new();
    let active = ListParams::default().fields(ACTIVE_PODS);
    let pods = each_page::<Pod>(ctx, active, |page| {
        surge::add_usage(&mut used, &page, demand.resource);
    });
    match pods.await {
        Ok(()) => surge::decide(template, demand, &nodes, &used),
        Err(why) => surge::unreadable(template, demand, &format!("listing pods: {why}")),
    }
}

/// A cluster-wide list, handed to `each` one page at a time.
async fn each_page<K>(
    ctx: &Context,
    lp: ListParams,
    mut each: impl FnMut(Vec<K>),
) -> Result<(), String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(ctx.client.clone());
    let mut lp = lp.limit(PAGE);
    loop {
        let page = api.list(&lp).await.map_err(|e| describe(&e))?;
        let token = page.metadata.continue_.filter(|t| !t.is_empty());
        each(page.items);
        match token {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// A failed read, for the message: the API server's own words when it
/// answered (a 403 names the missing permission).
fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// Whether applying `desired` changes the cached Deployment's pod template.
/// The fingerprint of the whole desired object settles the common case (an
/// object that did not change at all, and every Deployment a previous
/// release applied) without parsing the cached spec; otherwise the
/// templates are compared the way apply compares objects.
fn template_changes(desired: &Deployment, current: &LeanDeployment) -> bool {
    let Ok(mut json) = serde_json::to_value(desired) else {
        return true;
    };
    fingerprint::stamp(&mut json);
    let applied = json["metadata"]["annotations"][fingerprint::ANNOTATION].as_str();
    if applied.is_some() && current.annotation(fingerprint::ANNOTATION).as_deref() == applied {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(default)]
        template: Value,
    }
    let cached_template = current
        .spec
        .as_deref()
        .and_then(|raw| serde_json::from_str::<Spec>(raw.get()).ok());
    match cached_template {
        Some(spec) => !is_subset(&json["spec"]["template"], &spec.template),
        None => true,
    }
}
