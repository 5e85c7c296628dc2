//! `modelservice-operator run`: wires the Controller, its watches, leader
//! election, the admin server and shutdown together.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Config as ControllerRuntimeConfig;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;
use tracing::{debug, info};

use super::http::{self, Readiness};
use super::leader::{self, ElectionConfig};
use super::metrics::Metrics;
use super::shutdown::Shutdown;
use super::startup::{self, StartupError};
use crate::api::ModelService;
use crate::controller::context::synced;
use crate::controller::{Context, ControllerConfig, Leadership, Stores, error_policy, reconcile};
use crate::core::labels::{MANAGED_BY_LABEL, MANAGER};

/// Settings of `run`, already parsed.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub namespace: Option<String>,
    pub election: Option<ElectionConfig>,
    pub metrics_addr: SocketAddr,
    pub controller: ControllerConfig,
    pub startup_timeout: Duration,
    pub reporter_instance: Option<String>,
}

/// Why `run` stopped with a failure.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error("cannot serve metrics on {addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("leader election: {0}")]
    Election(#[from] kube_lease_manager::LeaseManagerError),
    #[error("lost the leader lease; exiting so that only the new leader writes")]
    LeaseLost,
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A child watch: only objects the operator labelled, without managedFields
/// (the largest part of a cached object, and never read), feeding `writer`.
fn child_stream<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let cfg = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGER}"));
    watcher(api, cfg)
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .touched_objects()
}

/// Runs until shutdown (Ok) or a fatal problem (Err).
pub async fn run(client: Client, cfg: RunConfig, shutdown: Shutdown) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new()?);
    let readiness = Readiness::default();
    let server = http::serve(
        cfg.metrics_addr,
        metrics.clone(),
        readiness.clone(),
        shutdown.clone(),
    )
    .await
    .map_err(|source| RunError::Http {
        addr: cfg.metrics_addr,
        source,
    })?;

    let ns = cfg.namespace.as_deref();
    startup::wait_for_api(&client, ns, cfg.startup_timeout, &shutdown).await?;
    info!(
        namespace = ns.unwrap_or("<all>"),
        "ModelService API is available; starting the controller"
    );

    let leadership = Leadership::new(cfg.election.is_none());
    metrics.set_leader(cfg.election.is_none());
    let mut election = match &cfg.election {
        Some(e) => Some(
            leader::start(
                client.clone(),
                e.clone(),
                leadership.clone(),
                metrics.clone(),
            )
            .await?,
        ),
        None => None,
    };

    let (dep_store, dep_writer) = reflector::store::<Deployment>();
    let (svc_store, svc_writer) = reflector::store::<Service>();
    let (hpa_store, hpa_writer) = reflector::store::<HorizontalPodAutoscaler>();
    let (ms_store, ms_writer) = reflector::store::<DeserializeGuard<ModelService>>();
    let ms_stream = watcher(
        api::<DeserializeGuard<ModelService>>(&client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|o: &mut DeserializeGuard<ModelService>| o.meta_mut().managed_fields = None)
    .reflect(ms_writer)
    .applied_objects();

    let stores = Stores {
        deployments: dep_store.clone(),
        services: svc_store.clone(),
        hpas: hpa_store.clone(),
    };
    {
        let (main, children) = (ms_store.clone(), stores.clone());
        tokio::spawn(async move {
            if synced(&main).await && children.wait_ready().await {
                info!("caches synced; ready");
                readiness.set_ready();
            }
        });
    }

    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: cfg.reporter_instance.clone(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        stores,
        config: cfg.controller.clone(),
        metrics: metrics.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        leadership,
        reported_invalid: Mutex::new(HashMap::new()),
        failures: std::sync::Mutex::new(HashMap::new()),
        applied: Default::default(),
        written_status: Default::default(),
    });

    let acquired = election.as_ref().map(|e| e.acquired.clone());
    let leader_trigger = futures::stream::unfold(acquired, |rx| async move {
        let mut rx = rx?;
        rx.changed().await.ok()?;
        let is_leader = *rx.borrow_and_update();
        Some((is_leader, Some(rx)))
    })
    .filter_map(|lead| async move { lead.then_some(()) });

    let controller = Controller::for_stream(ms_stream, ms_store)
        .owns_stream(child_stream(api::<Deployment>(&client, ns), dep_writer))
        .owns_stream(child_stream(api::<Service>(&client, ns), svc_writer))
        .owns_stream(child_stream(
            api::<HorizontalPodAutoscaler>(&client, ns),
            hpa_writer,
        ))
        .with_config(ControllerRuntimeConfig::default().concurrency(cfg.controller.concurrency))
        .reconcile_all_on(leader_trigger)
        .graceful_shutdown_on(shutdown.clone().wait())
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "controller event");
            }
        });

    let lost = async {
        match election.as_mut() {
            Some(e) => e.lost.recv().await,
            None => futures::future::pending().await,
        }
    };
    tokio::select! {
        _ = controller => info!("controller stopped; in-flight reconciles finished"),
        _ = lost => return Err(RunError::LeaseLost),
    }
    if let Some(e) = election {
        e.release().await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    Ok(())
}
