//! The fake's older baseline (the cluster's is `bare.rs`, which reuses
//! `apply_children` and `patch_status` from here): a client that issues only
//! the writes convergence needs,
//! with the very bodies the operator sends, and nothing else (no watches, no
//! caches, no reconcile loop).
//!
//! Per ModelService: the finalizer JSON patch, the server-side applies of the
//! Deployment and the Service (built and stamped by the operator's own pure
//! code), and the status merge patch; with `event`, also one Event. Responses
//! are decoded as lean as the operator decodes them. It talks TCP, like the
//! operator, at the operator's concurrency.
//!
//! Two timings: on ModelServices that already exist ("writes only"), and
//! from the first create with the creates made exactly as in the operator's
//! cold phase ("from first create"), which is what the operator's cold time
//! is measured against.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource};
use modelservice_operator::api::ModelService;
use modelservice_operator::controller::FINALIZER;
use modelservice_operator::controller::apply::FIELD_MANAGER as MANAGER;
use modelservice_operator::controller::finalizer::add_patch;
use modelservice_operator::controller::lean::{Lean, LeanDeployment, LeanService};
use modelservice_operator::controller::report::status_patch;
use modelservice_operator::core::diagnosis::GpuRequest;
use modelservice_operator::core::fingerprint::stamp;
use modelservice_operator::core::status::{Observed, compute, now_seconds};
use modelservice_operator::core::{build_children, validate};
use serde_json::json;

use crate::backend::{Backend, Variant};
use crate::{creates, name};

/// Runs the minimal client three times each way; prints both medians and
/// returns the one from the first create.
pub async fn measure(run: &mut usize, n: usize, concurrency: usize, event: bool) -> Duration {
    let mut only = Vec::new();
    let mut with_creates = Vec::new();
    // Single sub-second runs vary a lot on a small machine: medians of three.
    for _ in 0..3 {
        *run += 1;
        only.push(once(*run, n, concurrency, event, false).await);
        *run += 1;
        with_creates.push(once(*run, n, concurrency, event, true).await);
    }
    only.sort();
    with_creates.sort();
    let secs = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "| {n} | minimal client, {} writes per ModelService, concurrency {concurrency} | writes only {:.2} s (of {}) | from first create {:.2} s (of {}) |",
        if event { 5 } else { 4 },
        only[1].as_secs_f64(),
        secs(&only),
        with_creates[1].as_secs_f64(),
        secs(&with_creates),
    );
    with_creates[1]
}

async fn once(
    run: usize,
    n: usize,
    concurrency: usize,
    event: bool,
    timed_creates: bool,
) -> Duration {
    let Some(b) = Backend::new(run, Variant::Fake).await else {
        return Duration::ZERO;
    };
    let client = b.tcp_client().await;
    let ns = b.namespace().to_string();
    let writes = |ms: ModelService| {
        let (client, ns) = (client.clone(), ns.clone());
        async move { write(&client, &ns, ms, event).await }
    };
    let t;
    if timed_creates {
        t = Instant::now();
        creates(&b, n, "--v1")
            .for_each_concurrent(concurrency, writes)
            .await;
    } else {
        let created: Vec<ModelService> = creates(&b, n, "--v1").collect().await;
        t = Instant::now();
        stream::iter(created)
            .for_each_concurrent(concurrency, writes)
            .await;
    }
    let took = t.elapsed();
    // Its finalizer would keep a real namespace from being deleted.
    let api: Api<ModelService> = Api::namespaced(client.clone(), &ns);
    for i in 0..n {
        let _ = api
            .patch(
                &name(i),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    b.finish().await;
    took
}

/// The writes for one ModelService, each with the operator's body.
async fn write(client: &Client, ns: &str, ms: ModelService, event: bool) {
    let name = ms.metadata.name.clone().unwrap_or_default();
    let api: Api<Lean<ModelService>> = Api::namespaced(client.clone(), ns);
    if let Some(patch) =
        add_patch(&[], FINALIZER).and_then(|p| serde_json::from_value::<json_patch::Patch>(p).ok())
    {
        let _ = api
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await;
    }
    apply_children(client, ns, &ms, true).await;
    patch_status(client, ns, &ms).await;
    if event {
        let ev: Result<Event, _> = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{name}.")},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": MANAGER, "reportingInstance": "minimal",
            "action": "Apply", "reason": "Created", "type": "Normal",
            "note": format!("Created Deployment {name}, created Service {name}"),
            "regarding": {"apiVersion": modelservice_operator::core::convert::V1, "kind": "ModelService", "name": name, "namespace": ns}
        }));
        if let Ok(ev) = ev {
            let _ = Api::<Event>::namespaced(client.clone(), ns)
                .create(&Default::default(), &ev)
                .await;
        }
    }
}

/// Server-side applies the ModelService's Deployment and (with `service`)
/// its Service, built and stamped by the operator's own pure code.
pub async fn apply_children(client: &Client, ns: &str, ms: &ModelService, service: bool) {
    let name = ms.metadata.name.clone().unwrap_or_default();
    let Ok(valid) = validate(ms, ns) else {
        return;
    };
    let mut owner = ms.controller_owner_ref(&());
    if let Some(o) = owner.as_mut() {
        o.block_owner_deletion = Some(true);
    }
    let children = build_children(&valid, owner.as_ref());
    let apply = PatchParams::apply(MANAGER).force();
    if let Ok(mut d) = serde_json::to_value(&children.deployment) {
        stamp(&mut d);
        let _ = Api::<LeanDeployment>::namespaced(client.clone(), ns)
            .patch(&name, &apply, &Patch::Apply(&d))
            .await;
    }
    if !service {
        return;
    }
    if let Ok(mut s) = serde_json::to_value(&children.service) {
        stamp(&mut s);
        let _ = Api::<LeanService>::namespaced(client.clone(), ns)
            .patch(&name, &apply, &Patch::Apply(&s))
            .await;
    }
}

/// The operator's status merge patch for a ModelService whose Deployment
/// it has just written (observed generation = the object's generation).
pub async fn patch_status(client: &Client, ns: &str, ms: &ModelService) {
    let name = ms.metadata.name.clone().unwrap_or_default();
    let api: Api<Lean<ModelService>> = Api::namespaced(client.clone(), ns);
    let observed = Observed {
        name: &name,
        namespace: ns,
        generation: ms.metadata.generation.unwrap_or(1),
        port: Some(ms.spec.runtime.port),
        gpu: GpuRequest {
            gpus: ms.spec.resources.gpus,
            resource: &ms.spec.resources.gpu_resource,
        },
        blocked: None,
        deployment: None,
        surge: None,
        pods: &[],
        autoscaler: None,
        canary: None,
        route: None,
        recreating: None,
        groups: false,
        weights: None,
    };
    let status = compute(
        None,
        &observed,
        &now_seconds(k8s_openapi::jiff::Timestamp::now()),
    );
    if let Ok(patch) = status_patch(&status) {
        let _ = api
            .patch_status(&name, &PatchParams::apply(MANAGER), &Patch::Merge(patch))
            .await;
    }
}
