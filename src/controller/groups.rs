//! A LeaderWorkerSet as the report reads it: its groups stated as a
//! Deployment's rollout (see `core::groups`), from the LWS's status and
//! the cached pods of its ModelService.

use serde::Deserialize;

use super::Context;
use super::children::{Cached, Child, LeaderWorkerSetChild};
use super::lean::LeanDeployment;
use super::observe::{Track, cached, pods};
use crate::core::groups;
use crate::core::tracks::{CANARY, canary_may_go};

/// What of the LWS's spec the rollout is judged from.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shape {
    replicas: Option<i32>,
    leader_worker_template: Option<Size>,
}

#[derive(Deserialize)]
struct Size {
    size: Option<i32>,
}

/// `lws` as a Deployment would be: its generation, its replicas (groups),
/// and a status counted in groups whose every member is ready. `None`
/// when its names are missing or the result cannot be read back.
pub fn as_deployment(ctx: &Context, lws: &Cached<LeaderWorkerSetChild>) -> Option<LeanDeployment> {
    let meta = &lws.metadata;
    let (ns, name) = (meta.namespace.as_deref()?, meta.name.as_deref()?);
    let shape = lws
        .spec
        .as_deref()
        .and_then(|raw| serde_json::from_str::<Shape>(raw.get()).ok());
    // The API server's defaults, for a spec that leaves them out.
    let replicas = shape.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let size = shape
        .and_then(|s| s.leader_worker_template)
        .and_then(|t| t.size)
        .unwrap_or(1);
    let members = pods(ctx, ns, name, Track::Except(CANARY));
    let status = groups::as_rollout(lws.status.as_ref(), replicas, size, &members);
    let doc = serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "generation": meta.generation},
        "spec": {"replicas": replicas},
        "status": status,
    });
    serde_json::from_str(&doc.to_string()).ok()
}

/// The cached LWS of ModelService `name`, as [`as_deployment`] states it.
pub fn cached_state(ctx: &Context, ns: &str, name: &str) -> Option<LeanDeployment> {
    let lws = cached(&LeaderWorkerSetChild::cache(&ctx.stores).store, ns, name)?;
    as_deployment(ctx, &lws)
}

/// Whether a workload (a Deployment, or an LWS as [`as_deployment`] states
/// it) has rolled out and is ready: the one it replaces may then go.
pub fn ready(workload: Option<&LeanDeployment>) -> bool {
    canary_may_go(workload.map(LeanDeployment::state))
}
