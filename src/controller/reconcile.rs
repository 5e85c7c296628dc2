//! One reconcile: the five steps of DESIGN.md around the pure core, inside
//! kube-runtime's finalizer helper.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, instrument, warn};

use k8s_openapi::api::core::v1::Pod;

use super::children::{Cached, Child, HttpRouteChild, LeaderWorkerSetChild, ScaledObjectChild};
use super::guarded::Guarded;
use super::lean::LeanDeployment;
use super::observe::{Track, cached, pods};
use super::{Context, Error, apply, invalid, report, surge};
use crate::api::{Engine, ModelService, RouteBackend, lws};
use crate::core::canary_wait::CanaryWaiting;
use crate::core::diagnosis::{GpuRequest, Problem};
use crate::core::download::WeightsSeen;
use crate::core::rollback::{self, RolledBack};
use crate::core::status::{KedaSeen, Observed, compute, needs_pods, now_seconds};
use crate::core::strategy_status::{CanarySeen, PoolSeen, PoolsSeen, RouteSeen};
use crate::core::tracks::{self, CANARY, Weights};
use crate::core::{plan, reasons, validate_with};

/// The finalizer the operator puts on every ModelService.
pub const FINALIZER: &str = "serving.modelservice.dev/cleanup";

/// The Controller's reconcile function.
#[instrument(skip_all, fields(namespace = obj.namespace().unwrap_or_default(), name = obj.name_any()))]
pub async fn reconcile(
    obj: Arc<Guarded<ModelService>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if !ctx.leadership.is_leader() {
        // Standbys keep caches warm; the leader-acquired trigger reconciles all.
        return Ok(Action::await_change());
    }
    if !ctx.stores.wait_ready().await {
        return Ok(Action::requeue(std::time::Duration::from_secs(1)));
    }
    let started = Instant::now();
    let result = match &obj.0 {
        Ok(ms) => reconcile_valid(ms.clone(), &ctx).await,
        Err(bad) => invalid::handle(bad, &ctx).await,
    };
    ctx.metrics
        .reconciled(started.elapsed(), result.as_ref().err());
    if result.is_ok() {
        ctx.succeeded(
            &obj.namespace().unwrap_or_default(),
            &obj.name_any(),
            obj.0.is_ok(),
        );
    }
    if let (Err(e), Ok(ms)) = (&result, &obj.0) {
        warn!(error = %e, kind = e.kind(), "reconcile failed");
        let news = ctx.failures.is_news(
            &ms.namespace().unwrap_or_default(),
            &ms.name_any(),
            &e.cause(),
        );
        if news {
            ctx.events.publish(
                &ms.object_ref(&()),
                EventType::Warning,
                "ReconcileFailed",
                "Reconcile",
                e.to_string(),
            );
        }
    }
    result
}

/// Requeue with the controller's backoff; kube-runtime's scheduler spreads
/// retries, and a permanent problem is already in status, so there is no need
/// to retry fast.
pub fn error_policy(obj: Arc<Guarded<ModelService>>, err: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx
        .failures
        .failed(&obj.namespace().unwrap_or_default(), &obj.name_any());
    Action::requeue(super::backoff::delay(failures, err.is_permanent()))
}

async fn reconcile_valid(ms: ModelService, ctx: &Context) -> Result<Action, Error> {
    let ns = ms
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<ModelService> = Api::namespaced(ctx.client.clone(), &ns);
    // Finalizer and children in one round trip (see `finalizer`).
    let ensured = super::finalizer::ensure(ctx, ms)?;
    let ms = Arc::new(ensured.ms);
    let helper = finalizer(&api, FINALIZER, ms.clone(), |event| async move {
        match event {
            Finalizer::Apply(ms) => apply_spec(&ms, ctx).await,
            Finalizer::Cleanup(ms) => cleanup(&ms, ctx).await,
        }
    });
    let (added, result) = match ensured.pending {
        Some(patch) => futures::join!(super::finalizer::add(ctx, &ms, patch), helper),
        None => (Ok(()), helper.await),
    };
    let action = result.map_err(|e| Error::Finalizer(Box::new(e)))?;
    added?;
    Ok(action)
}

/// Transient failures in a row before status says so: fewer would flip
/// status for a single conflict or a moment of apiserver restart.
const FAILURES_SAID: u32 = 2;

/// What steps 2 to 4 leave for the report.
struct Acted {
    /// The Deployment as it is now, applied or cached.
    deployment: Option<LeanDeployment>,
    /// The ScaledObject, when KEDA scales and its API is served.
    scaled_object: Option<Cached<ScaledObjectChild>>,
    /// The canary Deployment, while the spec has a canary.
    canary: Option<LeanDeployment>,
    /// The HTTPRoute, with a route and Gateway API served.
    route: Option<Cached<HttpRouteChild>>,
    /// The InferencePools and their pickers, with `route.backend:
    /// InferencePool` and the pool's API served.
    pools: Vec<apply::AppliedPool>,
    /// The route's weights, with a route and a canary.
    weights: Option<Weights>,
    /// The canary's rollback, when it is rolled back.
    rolled_back: Option<RolledBack>,
    /// The canary's pods wait for GPUs.
    canary_waiting: Option<CanaryWaiting>,
    /// The canary's replicas while held for the stable track's rollout.
    canary_held: Option<i32>,
    /// Why the current spec is not what runs, when it is not.
    blocked: Option<Problem>,
    /// Kinds the spec asks for whose API the cluster does not serve.
    unavailable: Vec<String>,
    /// A permanent apply error: reported first, then returned for the backoff.
    failure: Option<Error>,
    /// When a closed loop (a surge judged by the scheduler) must look again.
    recheck: Option<Duration>,
    /// The weights, with `model.source`.
    weights_seen: Option<WeightsSeen>,
}

impl Acted {
    /// Nothing was applied because of `problem`; the cached Deployment
    /// still says what runs.
    fn blocked(
        ctx: &Context,
        ns: &str,
        name: &str,
        problem: Problem,
        failure: Option<Error>,
    ) -> Self {
        let store = &ctx.stores.deployments.store;
        let canary_name = tracks::canary_name(name);
        let canary = cached(store, ns, &canary_name)
            .map(|d| d.as_ref().clone())
            .or_else(|| super::groups::cached_state(ctx, ns, &canary_name));
        let rolled_back = canary
            .as_ref()
            .and_then(|c| c.annotation(rollback::ANNOTATION))
            .and_then(|a| serde_json::from_str(&a).ok());
        Self {
            deployment: cached(store, ns, name)
                .map(|d| d.as_ref().clone())
                .or_else(|| super::groups::cached_state(ctx, ns, name)),
            scaled_object: None,
            canary,
            route: None,
            pools: Vec::new(),
            weights: None,
            rolled_back,
            blocked: Some(problem),
            unavailable: Vec::new(),
            failure,
            recheck: None,
            weights_seen: None,
            canary_waiting: None,
            canary_held: None,
        }
    }
}

async fn apply_spec(ms: &ModelService, ctx: &Context) -> Result<Action, Error> {
    let ns = ms.namespace().unwrap_or_default();
    let name = ms.name_any();
    // Each step on the heap: a reconcile awaited in place (a test's) needs
    // no deep stack.
    let acted = Box::pin(validate_build_apply(ms, ctx, &ns, &name)).await?;
    let pods = observe_pods(ctx, &ns, &name, &acted);
    let (ready, reported) = Box::pin(report_status(ms, ctx, &ns, &name, &acted, &pods)).await?;
    if let Some(e) = acted.failure {
        return Err(e);
    }
    // A pod whose diagnosis changes (a canary starting to crash, say)
    // starts a reconcile through the pod watch; the requeue is only the
    // safety net of level triggering.
    let mut next = if ready {
        ctx.config.resync
    } else {
        ctx.config.not_ready_requeue
    };
    if let report::Reported::Paced(wait) | report::Reported::Conflicted(wait) = reported {
        next = next.min(wait);
    }
    if let Some(recheck) = acted.recheck {
        next = next.min(recheck);
    }
    // The object that holds a child's name is not ours, so no watch of ours
    // sees it go: look again soon.
    if acted
        .blocked
        .as_ref()
        .is_some_and(|p| p.reason == reasons::CHILD_CONFLICT)
    {
        next = next.min(CONFLICT_RECHECK);
    }
    Ok(Action::requeue(next))
}

/// How often a name held by someone else is looked at again.
const CONFLICT_RECHECK: Duration = Duration::from_secs(20);

/// Steps 2 to 4: validate and build (pure), then apply.
async fn validate_build_apply(
    ms: &ModelService,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Acted, Error> {
    let uid = ms.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let mut owner = ms
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    // Foreground deletion of the ModelService waits for its children.
    owner.block_owner_deletion = Some(true);
    let valid = match validate_with(ms, ns, &ctx.config.defaults) {
        Ok(valid) => valid,
        Err(invalid) => {
            info!(problem = %invalid, "spec is invalid; children left as they are");
            let p = Problem {
                reason: reasons::INVALID_SPEC,
                message: invalid.to_string(),
            };
            return Ok(Acted::blocked(ctx, ns, name, p, None));
        }
    };
    let prior = super::tracks::prior(ctx, &valid).await?;
    let mut plan = plan(&valid, Some(&owner), &prior);
    // Without the LeaderWorkerSet API, a spec of groups cannot run:
    // nothing of it is written, and what ran before keeps serving.
    if plan.children.groups.is_some() && !LeaderWorkerSetChild::cache(&ctx.stores).available() {
        return Ok(Acted::blocked(
            ctx,
            ns,
            name,
            multi_node_unavailable(&valid),
            None,
        ));
    }
    let settled = match (
        plan.children.deployment.as_mut(),
        plan.children.groups.as_mut(),
    ) {
        (Some(d), _) => Box::pin(surge::settle(ctx, &valid, d)).await,
        (None, Some(g)) => Box::pin(surge::settle_groups(ctx, &valid, g)).await,
        (None, None) => surge::Settled::default(),
    };
    // The spec was reported rolled out before: a write now is a repair.
    let repair = report::effective_status(ctx, ms)
        .status
        .and_then(|s| s.observed_generation)
        == ms.metadata.generation;
    // On the heap, as the steps are (see `apply_spec`).
    let owner_ref = ms.object_ref(&());
    let applied = Box::pin(apply::apply_children(
        ctx,
        &owner_ref,
        &uid,
        &plan.children,
        repair,
    ));
    match applied.await {
        Ok(applied) if applied.unavailable.iter().any(|k| k == lws::KIND) => Ok(Acted::blocked(
            ctx,
            ns,
            name,
            multi_node_unavailable(&valid),
            None,
        )),
        Ok(applied) => {
            let weights_seen = match &valid.spec.model.source {
                Some(source) => Some(
                    super::download::observe(
                        ctx,
                        ns,
                        name,
                        &source.uri,
                        applied.job.as_ref(),
                        applied_serving(&plan.children),
                    )
                    .await,
                ),
                None => None,
            };
            let recheck = match &weights_seen {
                Some(w) if w.waiting() => {
                    Some(settled.recheck.map_or(super::download::READ_EVERY, |r| {
                        r.min(super::download::READ_EVERY)
                    }))
                }
                _ => settled.recheck,
            };
            Ok(Acted {
                weights_seen,
                deployment: applied
                    .deployment
                    .map(|d| surge::remembered(ctx, settled.decision, d)),
                recheck,
                scaled_object: applied.scaled_object,
                canary: applied.canary,
                route: applied.route,
                pools: applied.pools,
                weights: plan.weights,
                rolled_back: plan.rolled_back,
                canary_waiting: prior.canary_waiting,
                canary_held: plan.canary_held,
                blocked: None,
                unavailable: applied.unavailable,
                failure: None,
            })
        }
        Err(Error::ChildConflict(c)) => Ok(Acted::blocked(ctx, ns, name, c.problem(), None)),
        Err(e) if e.is_permanent() => {
            let p = Problem {
                reason: reasons::RECONCILE_FAILED,
                message: e.to_string(),
            };
            Ok(Acted::blocked(ctx, ns, name, p, Some(e)))
        }
        // A transient error that keeps coming (the third in a row, about a
        // second of retries) is said in status too, so a model whose
        // applies fail never reads as healthy. Worded without the count, so
        // further retries of the same failure write nothing.
        Err(e) if ctx.failures.in_a_row(ns, name) >= FAILURES_SAID => {
            let p = Problem {
                reason: reasons::RECONCILE_FAILED,
                message: format!("{e}; retrying"),
            };
            Ok(Acted::blocked(ctx, ns, name, p, Some(e)))
        }
        Err(e) => Err(e),
    }
}

/// The source the stable workload just applied reads (its template's
/// annotation), which the previous one keeps while a new one downloads.
fn applied_serving(children: &crate::core::Children) -> Option<String> {
    let template = match (&children.deployment, &children.groups) {
        (Some(d), _) => d.spec.template.metadata.as_ref(),
        (None, Some(g)) => g
            .spec
            .leader_worker_template
            .leader_template
            .metadata
            .as_ref(),
        (None, None) => None,
    };
    template?
        .annotations
        .as_ref()?
        .get(crate::core::weights::SERVED_ANNOTATION)
        .cloned()
}

/// Why a spec of groups does not run: the cluster has no LeaderWorkerSet.
fn multi_node_unavailable(v: &crate::core::ValidSpec) -> Problem {
    Problem {
        reason: reasons::MULTI_NODE_UNAVAILABLE,
        message: format!(
            "spec.parallelism.pipeline is {}, which runs each replica as a group of pods on a LeaderWorkerSet, but the cluster has no LeaderWorkerSet API ({}/{}); install LeaderWorkerSet, or set pipeline to 1. What ran before keeps serving until then",
            v.spec.pipeline(),
            lws::GROUP,
            lws::VERSION
        ),
    }
}

/// Step 1, the pods: only when they can explain something. The canary's
/// pods speak for the canary (see `tracks::prior`).
fn observe_pods(ctx: &Context, ns: &str, name: &str, acted: &Acted) -> Vec<Pod> {
    let state = acted.deployment.as_ref().map(|d| d.state());
    if acted.blocked.is_none() && needs_pods(state) {
        pods(ctx, ns, name, Track::Except(CANARY))
    } else {
        Vec::new()
    }
}

/// Step 5: compute the status (pure) and write it if it changed. True when
/// the model is Ready; and what became of the status.
async fn report_status(
    ms: &ModelService,
    ctx: &Context,
    ns: &str,
    name: &str,
    acted: &Acted,
    pods: &[Pod],
) -> Result<(bool, report::Reported), Error> {
    let keda = ms
        .spec
        .autoscaling
        .as_ref()
        .filter(|a| a.engine() == Engine::Keda);
    let scaled_object_status = acted.scaled_object.as_ref().and_then(|s| s.status.as_ref());
    let rollout_decision = acted.deployment.as_ref().and_then(surge::on);
    let pools: Vec<PoolSeen<'_>> = acted
        .pools
        .iter()
        .map(|p| PoolSeen {
            name: p.pool.metadata.name.as_deref().unwrap_or_default(),
            status: p.pool.status.as_ref(),
            picker: p.picker.metadata.name.as_deref().unwrap_or_default(),
            picker_ready: p
                .picker
                .state()
                .status
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0),
        })
        .collect();
    // Groups that start over, from their leaders (cached pods, no request).
    let recreating = (ms.spec.pipeline() > 1).then(|| {
        let members = super::observe::pods(ctx, ns, name, Track::Except(CANARY));
        let leaders = crate::core::groups::leaders(&members);
        let counts = ctx.recreations.observe(ns, name, &leaders, Instant::now());
        crate::core::groups::recreating(&counts)
    });
    let observed = Observed {
        recreating: recreating.flatten(),
        groups: ms.spec.pipeline() > 1,
        weights: acted.weights_seen.as_ref(),
        name,
        namespace: ns,
        generation: ms.metadata.generation.unwrap_or(0),
        port: Some(ms.spec.runtime.port),
        gpu: GpuRequest {
            gpus: ms.spec.resources.gpus,
            resource: &ms.spec.resources.gpu_resource,
        },
        blocked: acted.blocked.clone(),
        deployment: acted.deployment.as_ref().map(|d| d.state()),
        surge: rollout_decision.as_ref().map(|d| d.message.as_str()),
        pods,
        autoscaler: keda.map(|_| KedaSeen {
            installed: !acted.unavailable.iter().any(|k| k == "ScaledObject"),
            status: scaled_object_status,
        }),
        canary: ms.spec.rollout.canary.as_ref().map(|c| CanarySeen {
            deployment: acted.canary.as_ref().map(|d| d.state()),
            rolled_back: acted.rolled_back.as_ref(),
            weights: acted.weights.as_ref(),
            waiting: acted.canary_waiting.as_ref(),
            held: acted.canary_held,
            wanted: c.replicas,
        }),
        route: ms.spec.route.as_ref().map(|r| RouteSeen {
            name,
            installed: !acted.unavailable.iter().any(|k| k == "HTTPRoute"),
            status: acted.route.as_ref().and_then(|r| r.status.as_ref()),
            parents: r.parent_refs.len(),
            weights_why: acted.weights.as_ref().and_then(|w| w.why.as_deref()),
            pools: (r.backend() == RouteBackend::InferencePool).then_some(PoolsSeen {
                installed: !acted
                    .unavailable
                    .iter()
                    .any(|k| k == crate::api::inference::KIND),
                pools: &pools,
            }),
        }),
    };
    let seen = report::effective_status(ctx, ms);
    let status = compute(
        seen.status.as_ref(),
        &observed,
        &now_seconds(k8s_openapi::jiff::Timestamp::now()),
    );
    let ready =
        crate::core::conditions::find(&status.conditions, crate::api::condition_types::READY)
            .is_some_and(|c| c.status == "True");
    let reported = report::report(ctx, ms, &ms.object_ref(&()), &seen, &status).await?;
    Ok((ready, reported))
}

/// Deletion: children go with owner-reference garbage collection, so cleanup
/// only forgets the object. Nothing here can fail on a missing object, so
/// deletion never hangs on the operator. No Event: the object's going is
/// its own record, and the Event would outlive it.
async fn cleanup(ms: &ModelService, ctx: &Context) -> Result<Action, Error> {
    ctx.forget_object(&ms.namespace().unwrap_or_default(), &ms.name_any());
    Ok(Action::await_change())
}
