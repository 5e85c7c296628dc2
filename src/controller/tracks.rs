//! Step 1 for the tracks: what the canary and the stable track look like
//! before this reconcile, from the caches, plus the canary's pods when they
//! can explain a failure.

use std::sync::Arc;

use super::children::{Child, JobChild, LeaderWorkerSetChild};
use super::lean::LeanDeployment;
use super::observe::{Track, cached, pods};
use super::{Context, Error};
use crate::core::children::WeightsPrior;
use crate::core::diagnosis::GpuRequest;
use crate::core::status::needs_pods;
use crate::core::tracks::{CANARY, Readiness, canary_may_go, canary_name};
use crate::core::{Prior, ValidSpec, canary_wait, rollback};

/// The cached workload `name` of `v`'s shape: a Deployment, or with
/// groups a LeaderWorkerSet stated as one (see `groups`).
fn workload(ctx: &Context, v: &ValidSpec, name: &str) -> Option<Arc<LeanDeployment>> {
    if v.spec.pipeline() > 1 {
        super::groups::cached_state(ctx, &v.namespace, name).map(Arc::new)
    } else {
        cached(&ctx.stores.deployments.store, &v.namespace, name)
    }
}

/// The world the children of `v` are planned in.
pub async fn prior(ctx: &Context, v: &ValidSpec) -> Result<Prior, Error> {
    let (ns, name) = (v.namespace.as_str(), v.name.as_str());
    let stable = workload(ctx, v, name);
    let canary = v
        .spec
        .rollout
        .canary
        .as_ref()
        .and_then(|_| workload(ctx, v, &canary_name(name)));
    let ready = |d: Option<&LeanDeployment>| {
        d.and_then(|d| d.status.as_ref())
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
    };
    let canary_kept = canary
        .as_ref()
        .and_then(|c| c.annotation(rollback::ANNOTATION));
    let gpu = GpuRequest {
        gpus: v.spec.resources.gpus,
        resource: &v.spec.resources.gpu_resource,
    };
    // Pods speak only while the canary is neither rolled back nor complete.
    let (canary_cause, canary_waiting) = match canary.as_deref() {
        Some(c) if canary_kept.is_none() => {
            let pods = if needs_pods(Some(c.state())) {
                pods(ctx, ns, name, Track::Only(CANARY))
            } else {
                Vec::new()
            };
            let now = k8s_openapi::jiff::Timestamp::now();
            (
                rollback::cause(Some(c.state()), &pods, gpu),
                canary_wait::waiting(&pods, gpu, now, ctx.config.surge_grace),
            )
        }
        _ => (None, None),
    };
    // The workload of the other shape, until the new one is ready.
    let other = if v.spec.pipeline() > 1 {
        cached(&ctx.stores.deployments.store, ns, name).is_some()
    } else {
        cached(&LeaderWorkerSetChild::cache(&ctx.stores).store, ns, name).is_some()
    };
    let stable_template = stable.as_deref().and_then(LeanDeployment::template);
    let weights = WeightsPrior {
        complete: crate::core::weights::downloaded(v).is_some_and(|source| {
            let job = crate::core::weights::job_name(v, &source);
            cached(&JobChild::cache(&ctx.stores).store, ns, &job).is_some_and(|j| {
                super::download::job_state(&j) == super::download::JobState::Complete
            })
        }),
        serving: stable_template
            .as_ref()
            .and_then(|t| {
                t.pointer(&format!(
                    "/metadata/annotations/{}",
                    crate::core::weights::SERVED_ANNOTATION.replace('/', "~1")
                ))
            })
            .and_then(|a| a.as_str())
            .map(str::to_string),
    };
    Ok(Prior {
        weights,
        switching: other,
        canary_waiting,
        canary_held_before: canary_wait::held_before(
            canary
                .as_deref()
                .and_then(|c| c.annotation(canary_wait::ANNOTATION))
                .as_deref(),
        ),
        stable_rolling_out: stable
            .as_deref()
            .is_some_and(|s| !canary_may_go(Some(s.state()))),
        stable_template,
        readiness: Readiness {
            stable_ready: ready(stable.as_deref()),
            canary_ready: ready(canary.as_deref()),
            canary_rolled_back: false,
        },
        canary_template: canary.as_deref().and_then(LeanDeployment::template),
        canary_kept,
        canary_cause,
    })
}
