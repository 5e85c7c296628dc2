//! The surge decision's I/O (see `core::surge`): which decision the desired
//! Deployment carries, and the one read of nodes and pods when a rollout
//! starts.
//!
//! The decision is looked for where it costs nothing first: our own recent
//! decision (the cache may not show our write yet), then the cached
//! Deployment's annotation, then the cached Deployment's fingerprint. Only a
//! pod template that really changes on an existing Deployment takes the
//! cluster's free GPUs, from the ledger (`gpu_ledger`: nodes and pods
//! watched from the first such rollout on, reduced to per-node sums), at a
//! cost of O(nodes). Rollouts that start within `--surge-read-window` of one
//! view share it, each surge reserving its GPUs in it until the ledger has
//! seen the surge pods: a change that rolls out a thousand models cannot
//! give one free GPU to each.
//!
//! The decision is a prediction, and the scheduler is the truth: while a
//! surge is in force, our pods are judged against it (`core::refutation`,
//! from the pod cache, no request). A pod the scheduler cannot place for
//! lack of GPUs ends the shared read at once, so no later rollout decides
//! from it, and past the grace period switches its template to replace.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use kube::Resource;
use serde_json::Value;
use tracing::info;

use super::Context;
use super::children::{Child, LeaderWorkerSetChild};
use super::freshness::Freshness;
use super::lean::LeanDeployment;
use super::observe::{Track, cached, pods};
use super::recent::{self, Recent};
use crate::api::lws::LeaderWorkerSet;
use crate::api::{RolloutStrategy, Surge};
use crate::core::ValidSpec;
use crate::core::fingerprint;
use crate::core::leader_worker_set;
use crate::core::refutation::{self, Verdict};
use crate::core::rollout::{Rollout, rollout};
use crate::core::subset::is_subset;
use crate::core::surge::{self, Decision, Demand, Plan, Seen};
use crate::core::tracks::CANARY;

/// What this process remembers for its surge decisions (in `Context`).
#[derive(Default)]
pub struct Memory {
    /// Decisions we applied, until the Deployment cache shows them.
    recent: Recent<Decision>,
    /// The last view of the cluster, shared by the decisions that follow it.
    /// Behind an async lock, so that concurrent rollout starts wait for one
    /// read instead of each making their own.
    read: tokio::sync::Mutex<Option<Read>>,
    /// The cluster's nodes and what their pods hold, watched once a
    /// decision first needs them.
    ledger: Arc<super::gpu_ledger::Ledger>,
}

impl Memory {
    /// What the ledger counts as held of `resource` on `node`, in
    /// milli-units (0 before it started).
    pub fn held_on(&self, node: &str, resource: &str) -> i128 {
        self.ledger.held_on(node, resource)
    }

    /// Forgets what was remembered of one ModelService (deleted).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.recent.forget(&key(namespace, name));
    }

    /// A pod of ours has waited for `resource` since `since`: a shared read
    /// of that resource made before then counted GPUs the scheduler does
    /// not have, so no further decision is taken from it.
    async fn stale_since(&self, resource: &str, since: Timestamp) {
        let mut shared = self.read.lock().await;
        if shared
            .as_ref()
            .is_some_and(|r| r.resource == resource && outdated(r.wall, since))
        {
            info!(
                resource,
                "a pod waits for GPUs the last read counted as free; the next rollout reads again"
            );
            *shared = None;
        }
    }
}

/// Whether the Deployment is rolling out its template (or stuck doing so),
/// rather than done with it.
fn rolls_out(d: &LeanDeployment) -> bool {
    matches!(
        rollout(Some(d.state())),
        Rollout::NotObserved | Rollout::RollingOut { .. } | Rollout::Stuck { .. }
    )
}

/// Whether a read made at `read` is older than a wait that began at
/// `since`. The scheduler writes whole seconds: a wait within the read's
/// own second counts as after it.
fn outdated(read: Timestamp, since: Timestamp) -> bool {
    since.as_second() >= read.as_second()
}

/// One read of the cluster, for one GPU resource.
struct Read {
    at: Instant,
    /// When it was made, as the scheduler's clock would write it: a pod that
    /// started waiting for GPUs after it proves it stale.
    wall: Timestamp,
    resource: String,
    nodes: Vec<Node>,
    /// Milli-units of the resource requested per node, with our surges
    /// since the read added.
    used: BTreeMap<String, i128>,
}

/// What [`settle`] leaves for the rest of the reconcile.
#[derive(Debug, Default)]
pub struct Settled {
    /// The decision the desired Deployment carries, if any.
    pub decision: Option<Decision>,
    /// When to judge the surge again: a pod waits for GPUs, and its grace
    /// period ends then.
    pub recheck: Option<Duration>,
}

/// Stamps the desired Deployment with its surge decision, taking one when a
/// rollout starts, and judges a surge in force against what the scheduler
/// says of our pods. No decision (the Deployment as built) when there is
/// none to carry: surge Never, Recreate, a new Deployment or an unchanged
/// template. Never fails: a cluster that cannot be read means replace, and
/// the message says why.
pub async fn settle(ctx: &Context, v: &ValidSpec, desired: &mut Deployment) -> Settled {
    let current = cached(&ctx.stores.deployments.store, &v.namespace, &v.name);
    settle_on(ctx, v, desired, current, &ctx.stores.deployments.fresh).await
}

/// [`settle`] for groups: the decision is taken on the leaders' pod
/// template (a group surges only if all of it fits: see
/// `core::surge::Demand::group`) and carried by the LeaderWorkerSet, its
/// `maxSurge` counted in groups.
pub async fn settle_groups(ctx: &Context, v: &ValidSpec, desired: &mut LeaderWorkerSet) -> Settled {
    let mut proxy = Deployment {
        metadata: desired.metadata.clone(),
        spec: DeploymentSpec {
            replicas: desired.spec.replicas,
            template: desired.spec.leader_worker_template.leader_template.clone(),
            ..DeploymentSpec::default()
        },
        status: None,
    };
    let current = super::groups::cached_state(ctx, &v.namespace, &v.name).map(Arc::new);
    let fresh = LeaderWorkerSetChild::cache(&ctx.stores).fresh.clone();
    let settled = settle_on(ctx, v, &mut proxy, current, &fresh).await;
    if let Some(d) = &settled.decision {
        leader_worker_set::stamp(desired, d);
    }
    settled
}

/// [`settle`] of `desired`, whose cached copy is `current`, kept by a cache
/// of freshness `fresh`.
async fn settle_on(
    ctx: &Context,
    v: &ValidSpec,
    desired: &mut Deployment,
    current: Option<Arc<LeanDeployment>>,
    fresh: &Freshness,
) -> Settled {
    let rollout = &v.spec.rollout;
    if rollout.strategy != RolloutStrategy::RollingUpdate || rollout.surge() != Surge::Auto {
        return Settled::default();
    }
    let (ns, name) = (v.namespace.as_str(), v.name.as_str());
    let template = surge::template_hash(desired);
    let cached_rv = current
        .as_ref()
        .and_then(|c| c.meta().resource_version.clone());
    let recent = ctx
        .surge
        .recent
        .newer_than_cache(&key(ns, name), cached_rv.as_deref(), fresh);
    let seen = Seen {
        exists: current.is_some(),
        decision: current.as_deref().and_then(on),
    };
    let changes = || {
        current
            .as_ref()
            .is_none_or(|c| template_changes(desired, c))
    };
    let mut recheck = None;
    let decision = match surge::plan(&template, recent.as_ref(), seen, changes) {
        Plan::Nothing => return Settled::default(),
        // Judged only while the template rolls out: a pod that waits for
        // GPUs later (the HPA scaling up) refutes no rollout.
        Plan::Keep(d) if current.as_ref().is_some_and(|c| rolls_out(c)) => {
            let (d, after) = judged(ctx, v, d).await;
            recheck = after;
            d
        }
        Plan::Keep(d) => d,
        Plan::Decide => {
            let mut demand = Demand::of(v);
            if v.spec.autoscaling.is_some() {
                // The HPA owns the count: the rollout replaces what runs.
                demand.replicas = current
                    .as_ref()
                    .and_then(|c| c.state().replicas)
                    .unwrap_or(demand.replicas);
            }
            let d = decide(ctx, &template, &demand).await;
            ctx.metrics
                .surge_decision(if d.surge { "surge" } else { "replace" });
            // No Event of its own: the apply's "Updated Deployment" Event
            // already marks the rollout, and a mass rollout would double the
            // Events (and drop some) to repeat what Progressing says.
            info!(surge = d.surge, max_surge = d.pods_surged(), message = %d.message, "rollout starts");
            d
        }
    };
    surge::stamp(desired, &decision);
    Settled {
        decision: Some(decision),
        recheck,
    }
}

/// A decision in force, judged against the scheduler's verdict on our pods
/// (the stable track's: a canary has its own loop); and when to judge it
/// again, while a pod waits within its grace period.
async fn judged(ctx: &Context, v: &ValidSpec, d: Decision) -> (Decision, Option<Duration>) {
    if !d.surge {
        return (d, None);
    }
    let resource = v.spec.resources.gpu_resource.as_str();
    let ours = pods(ctx, &v.namespace, &v.name, Track::Except(CANARY));
    match refutation::judge(
        &d,
        &ours,
        resource,
        Timestamp::now(),
        ctx.config.surge_grace,
    ) {
        Verdict::Holds => (d, None),
        Verdict::Waiting { since, recheck } => {
            ctx.surge.stale_since(resource, since).await;
            (d, Some(recheck))
        }
        Verdict::Refuted { since, decision } => {
            ctx.surge.stale_since(resource, since).await;
            ctx.metrics.surge_decision("refuted");
            info!(message = %decision.message, "surge refuted; the rollout replaces");
            (decision, None)
        }
    }
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

/// Decides from a read of the cluster no older than the read window, made
/// now if there is none; a read that fails decides replace (and is not
/// kept: the next rollout tries again).
async fn decide(ctx: &Context, template: &str, demand: &Demand<'_>) -> Decision {
    if demand.gpus <= 0 {
        // A pod without GPUs needs no free ones: nothing to read.
        return surge::decide(template, demand, &[], &BTreeMap::new());
    }
    let mut shared = ctx.surge.read.lock().await;
    let window = ctx.config.surge_read_window;
    let fresh = shared
        .as_ref()
        .is_some_and(|r| r.resource == demand.resource && r.at.elapsed() < window);
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

/// The ledger's view of the cluster (see `gpu_ledger`): O(nodes), no
/// request once its watches run.
async fn read(ctx: &Context, resource: &str) -> Result<Read, String> {
    let at = Instant::now();
    let wall = Timestamp::now();
    let view = ctx
        .surge
        .ledger
        .snapshot(&ctx.client, &ctx.metrics, resource)
        .await?;
    tracing::debug!(
        nodes = view.nodes.len(),
        pods = view.pods,
        "took the cluster's free GPUs for a rollout"
    );
    Ok(Read {
        at,
        wall,
        resource: resource.to_string(),
        nodes: view.nodes,
        used: view.used,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_wait_that_began_after_the_read_ends_it_and_an_older_one_does_not() {
        let read = at("2026-12-05T08:00:05.400Z");
        // The scheduler stamps whole seconds: a wait stamped in the read's
        // own second may have begun after it.
        assert!(outdated(read, at("2026-12-05T08:00:05Z")));
        assert!(outdated(read, at("2026-12-05T08:00:09Z")));
        // A wait that began before the read is older news than the read,
        // which saw the cluster after it: the read stays.
        assert!(!outdated(read, at("2026-12-05T08:00:04Z")));
    }
}
