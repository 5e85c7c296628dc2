//! The surge decision's I/O (see `core::surge`): which decision the desired
//! Deployment carries, and the one read of nodes and pods when a rollout
//! starts.
//!
//! The decision is looked for where it costs nothing first: our own recent
//! decision (the cache may not show our write yet), then the cached
//! Deployment's annotation, then the cached Deployment's fingerprint. Only a
//! pod template that really changes on an existing Deployment reads the
//! cluster: one node list and one pod list, paged, nothing watched, so a
//! settled operator pays nothing for this feature. Rollouts that start
//! within [`SHARED_FOR`] of one read share it, each surge reserving its GPUs
//! in it: a change that rolls out a thousand models reads the cluster a few
//! times, not a thousand times (each read is of every pod in the cluster).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;

use super::pod_usage::UsagePod;
use kube::api::ListParams;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::info;

use super::Context;
use super::lean::LeanDeployment;
use super::observe::cached;
use super::recent::{self, Recent};
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

/// How long one read of the cluster serves the decisions that follow it.
/// Longer saves reads in a mass rollout; shorter misses fewer GPUs freed or
/// taken by others meanwhile (our own surges are reserved in it).
pub const SHARED_FOR: Duration = Duration::from_secs(5);

/// What this process remembers for its surge decisions (in `Context`).
#[derive(Default)]
pub struct Memory {
    /// Decisions we applied, until the Deployment cache shows them.
    recent: Recent<Decision>,
    /// The last read of the cluster, shared by the decisions that follow it.
    /// Behind an async lock, so that concurrent rollout starts wait for one
    /// read instead of each making their own.
    read: tokio::sync::Mutex<Option<Read>>,
}

impl Memory {
    /// Forgets what was remembered of one ModelService (deleted).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.recent.forget(&key(namespace, name));
    }
}

/// One read of the cluster, for one GPU resource.
struct Read {
    at: Instant,
    resource: String,
    nodes: Vec<Node>,
    /// Milli-units of the resource requested per node, with our surges
    /// since the read added.
    used: BTreeMap<String, i128>,
}

/// Stamps the desired Deployment with its surge decision, taking one when a
/// rollout starts; `None` (the Deployment as built) when there is no
/// decision to carry: surge Never, Recreate, a new Deployment or an
/// unchanged template. Never fails: a cluster that cannot be read means
/// replace, and the message says why.
pub async fn settle(ctx: &Context, v: &ValidSpec, desired: &mut Deployment) -> Option<Decision> {
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
    let recent = ctx.surge.recent.newer_than_cache(
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
            // No Event of its own: the apply's "Updated Deployment" Event
            // already marks the rollout, and a mass rollout would double the
            // Events (and drop some) to repeat what Progressing says.
            info!(surge = d.surge, message = %d.message, "rollout starts");
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
        ctx.surge
            .recent
            .record(&key(ns, name), meta.resource_version.as_deref(), decision);
    }
    applied
}

/// The decision a Deployment carries, for its rollout's Progressing message.
pub fn on(deployment: &LeanDeployment) -> Option<Decision> {
    Decision::decode(&deployment.annotation(surge::ANNOTATION)?)
}

/// The key of a Deployment's decision in [`Memory`]'s recent decisions.
fn key(namespace: &str, name: &str) -> String {
    recent::key("Deployment", namespace, name)
}

/// Decides from a read of the cluster no older than [`SHARED_FOR`], made
/// now if there is none; a read that fails decides replace (and is not
/// kept: the next rollout tries again).
async fn decide(ctx: &Context, template: &str, demand: &Demand<'_>) -> Decision {
    if demand.gpus <= 0 {
        // A pod without GPUs needs no free ones: nothing to read.
        return surge::decide(template, demand, &[], &BTreeMap::new());
    }
    let mut shared = ctx.surge.read.lock().await;
    let fresh = shared
        .as_ref()
        .is_some_and(|r| r.resource == demand.resource && r.at.elapsed() < SHARED_FOR);
    if !fresh {
        *shared = None;
        match read(ctx, demand.resource).await {
            Ok(r) => *shared = Some(r),
            Err(why) => return surge::unreadable(template, demand, &why),
        }
    }
    match shared.as_mut() {
        Some(r) => surge::decide_and_reserve(template, demand, &r.nodes, &mut r.used),
        None => surge::unreadable(template, demand, "no read"),
    }
}

/// One node list and one paged pod list, the pods reduced to per-node sums.
async fn read(ctx: &Context, resource: &str) -> Result<Read, String> {
    let at = Instant::now();
    let mut nodes: Vec<Node> = Vec::new();
    each_page(ctx, ListParams::default(), |page| {
        nodes.extend(page.into_iter().map(surge::slim));
    })
    .await
    .map_err(|why| format!("listing nodes: {why}"))?;
    let mut used = BTreeMap::new();
    let mut pods = 0usize;
    let active = ListParams::default().fields(ACTIVE_PODS);
    each_page::<UsagePod>(ctx, active, |page| {
        pods += page.len();
        surge::add_usage(&mut used, page.iter().map(|p| &p.0), resource);
    })
    .await
    .map_err(|why| format!("listing pods: {why}"))?;
    info!(
        nodes = nodes.len(),
        pods,
        took_ms = at.elapsed().as_millis() as u64,
        "read the cluster's free GPUs for a rollout"
    );
    Ok(Read {
        at,
        resource: resource.to_string(),
        nodes,
        used,
    })
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
