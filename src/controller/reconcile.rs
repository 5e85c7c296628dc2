//! One reconcile: the five steps of DESIGN.md around the pure core, inside
//! kube-runtime's finalizer helper.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, instrument, warn};

use super::guarded::Guarded;
use super::observe::{cached, pods};
use super::{Context, Error, apply, invalid, report};
use crate::api::ModelService;
use crate::core::diagnosis::{GpuRequest, Problem};
use crate::core::status::{Observed, compute, needs_pods, now_seconds};
use crate::core::{build_children, reasons, validate};

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
        ctx.events.publish(
            &ms.object_ref(&()),
            EventType::Warning,
            "ReconcileFailed",
            "Reconcile",
            e.to_string(),
        );
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
    // Finalizer and children in one pass (see `finalizer::ensure`).
    let ms = super::finalizer::ensure(ctx, &api, ms).await?;
    finalizer(&api, FINALIZER, Arc::new(ms), |event| async move {
        match event {
            Finalizer::Apply(ms) => apply_spec(&ms, ctx).await,
            Finalizer::Cleanup(ms) => cleanup(&ms, ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

async fn apply_spec(ms: &ModelService, ctx: &Context) -> Result<Action, Error> {
    let ns = ms.namespace().unwrap_or_default();
    let name = ms.name_any();
    let uid = ms.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let mut owner = ms
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    // Foreground deletion of the ModelService waits for its children.
    owner.block_owner_deletion = Some(true);
    let reference = ms.object_ref(&());
    let generation = ms.metadata.generation.unwrap_or(0);

    // Steps 2 and 3: validate and build, pure.
    let (deployment, blocked, failure) = match validate(ms, &ns) {
        Err(invalid) => {
            info!(problem = %invalid, "spec is invalid; children left as they are");
            let dep = cached(&ctx.stores.deployments.store, &ns, &name).map(|d| d.as_ref().clone());
            let p = Problem {
                reason: reasons::INVALID_SPEC,
                message: invalid.to_string(),
            };
            (dep, Some(p), None)
        }
        Ok(valid) => {
            let children = build_children(&valid, Some(&owner));
            // Step 4: apply.
            match apply::apply_children(ctx, &reference, &uid, &children).await {
                Ok(dep) => (Some(dep), None, None),
                Err(e) if e.is_permanent() => {
                    let dep = cached(&ctx.stores.deployments.store, &ns, &name)
                        .map(|d| d.as_ref().clone());
                    let p = Problem {
                        reason: reasons::RECONCILE_FAILED,
                        message: e.to_string(),
                    };
                    (dep, Some(p), Some(e))
                }
                Err(e) => return Err(e),
            }
        }
    };

    // Step 1 (the on-demand part): pods, only when they can explain something.
    let state = deployment.as_ref().map(|d| d.state());
    let pods = if blocked.is_none() && needs_pods(state) {
        pods(ctx, &ns, &name).await?
    } else {
        Vec::new()
    };

    // Step 5: report.
    let observed = Observed {
        name: &name,
        namespace: &ns,
        generation,
        port: Some(ms.spec.runtime.port),
        gpu: GpuRequest {
            gpus: ms.spec.resources.gpus,
            resource: &ms.spec.resources.gpu_resource,
        },
        blocked,
        deployment: state,
        pods: &pods,
    };
    let previous = report::effective_status(ctx, ms);
    let status = compute(
        previous.as_ref(),
        &observed,
        &now_seconds(k8s_openapi::jiff::Timestamp::now()),
    );
    let ready =
        crate::core::conditions::find(&status.conditions, crate::api::condition_types::READY)
            .is_some_and(|c| c.status == "True");
    report::report(ctx, ms, &reference, previous.as_ref(), &status).await?;

    if let Some(e) = failure {
        return Err(e);
    }
    Ok(Action::requeue(if ready {
        ctx.config.resync
    } else {
        ctx.config.not_ready_requeue
    }))
}

/// Deletion: children go with owner-reference garbage collection, so cleanup
/// only forgets the object's metrics and says goodbye. Nothing here can fail
/// on a missing object, so deletion never hangs on the operator.
async fn cleanup(ms: &ModelService, ctx: &Context) -> Result<Action, Error> {
    let ns = ms.namespace().unwrap_or_default();
    let name = ms.name_any();
    ctx.metrics.forget(&ns, &name);
    report::forget(ctx, ms);
    apply::forget(ctx, &ns, &name);
    super::finalizer::forget(ctx, ms);
    let reference: ObjectReference = ms.object_ref(&());
    ctx.events.publish(
        &reference,
        EventType::Normal,
        "Deleting",
        "Cleanup",
        "ModelService is being deleted; its Deployment, Service and HPA are garbage-collected"
            .into(),
    );
    Ok(Action::await_change())
}
