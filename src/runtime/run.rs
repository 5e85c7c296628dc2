//! `modelservice-operator run`: wires the Controller, its watches, leader
//! election, the admin server and shutdown together.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::controller::Config as ControllerRuntimeConfig;
use kube::runtime::events::Reporter;
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::http::{self, Readiness};
use super::leader::{self, ElectionConfig};
use super::shutdown::Shutdown;
use super::startup::{self, StartupError};
use super::{code_pages, discovery, storage_migration, watches};
use crate::api::ModelService;
use crate::controller::apply::FIELD_MANAGER;
use crate::controller::children::{Cached, Child, ForEachWriter};
use crate::controller::context::synced;
use crate::controller::events::Events;
use crate::controller::freshness::Freshness;
use crate::controller::guarded::Guarded;
use crate::controller::lean::LAST_APPLIED;
use crate::controller::pods::PodView;
use crate::controller::{Context, ControllerConfig, Leadership, Stores, error_policy, reconcile};
use crate::metrics::Metrics;
use crate::webhook::{self, Convert, WebhookConfig, WebhookError};

/// How long the webhook keeps serving after SIGTERM (well inside the
/// chart's termination grace period of 30 s).
const WEBHOOK_DRAIN: Duration = Duration::from_secs(5);

/// Settings of `run`, already parsed.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub namespace: Option<String>,
    pub election: Option<ElectionConfig>,
    pub metrics_addr: SocketAddr,
    /// Requests in flight at once, watches and the Lease aside.
    pub max_requests_in_flight: usize,
    pub controller: ControllerConfig,
    pub startup_timeout: Duration,
    pub reporter_instance: Option<String>,
    /// The conversion webhook; `None` serves none.
    pub webhook: Option<WebhookConfig>,
    /// What the webhook converts with (pure; the core's conversion).
    pub convert: Convert,
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
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("lost the leader lease; exiting so that only the new leader writes")]
    LeaseLost,
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    #[error(
        "the conversion webhook has no certificate after {0:?} (see the warnings above: the API server or the certificate files are not available)"
    )]
    WebhookTimeout(Duration),
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

/// Drops what the operator never reads from a cached ModelService:
/// managedFields (often the largest part of it) and the copy of the whole
/// object that client-side `kubectl apply` keeps in an annotation. Nothing
/// writes a cached object back, so nothing is lost on the server. Children
/// are decoded without either in the first place (see `lean`).
fn trim<K: Resource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// What the ModelService watch does with a deletion: forget the object's
/// per-object memory (see `Context::forget_object`).
fn forget_deleted(
    ctx: Arc<Context>,
) -> impl FnMut(&Result<watcher::Event<Guarded<ModelService>>, watcher::Error>) {
    move |event| {
        if let Ok(watcher::Event::Delete(ms)) = event {
            ctx.forget_object(&ms.namespace().unwrap_or_default(), &ms.name_any());
        }
    }
}

/// A watch's objects without our own writes coming back (see
/// `controller::echoes`): the caches took them, no reconcile needs them.
/// Every object also ends the stand-ins of our writes it already holds
/// (`Context::caught_up`).
fn without_echoes<K, S>(
    stream: S,
    ctx: Arc<Context>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send
where
    S: futures::Stream<Item = Result<K, watcher::Error>> + Send,
    K: Resource<DynamicType = ()> + Send,
{
    stream.filter(move |item| {
        if let Ok(o) = item {
            ctx.caught_up(o);
        }
        futures::future::ready(!matches!(item, Ok(o) if ctx.echoes.of(o)))
    })
}

/// Gives the Controller one watch per row of the child table: an optional
/// kind's watch runs only while its API is served.
struct OwnedWatches<'a> {
    controller: Option<Controller<Guarded<ModelService>>>,
    client: &'a Client,
    namespace: Option<&'a str>,
    metrics: &'a Arc<Metrics>,
    ctx: &'a Arc<Context>,
    page: u32,
}

impl ForEachWriter for OwnedWatches<'_> {
    fn visit<C: Child>(
        &mut self,
        writer: reflector::store::Writer<Cached<C>>,
        fresh: Arc<Freshness>,
    ) {
        let Some(controller) = self.controller.take() else {
            return;
        };
        let api = api::<Cached<C>>(self.client, self.namespace);
        let metrics = self.metrics.clone();
        let ctx = self.ctx.clone();
        self.controller = Some(if C::OPTIONAL {
            let cache = C::cache(&self.ctx.stores).clone();
            let available = cache.availability();
            let gone = move || {
                if cache.refute() {
                    tracing::warn!(kind = %C::Object::kind(&()), "optional API gone: its watch answered 404");
                }
            };
            controller.owns_stream(without_echoes(
                watches::gated_child_watch(api, self.page, available, gone, writer, fresh, metrics),
                ctx,
            ))
        } else {
            controller.owns_stream(without_echoes(
                watches::child_watch(api, self.page, writer, fresh, metrics),
                ctx,
            ))
        });
    }
}

/// Runs until shutdown (Ok) or a fatal problem (Err), with a client built
/// from `config` whose every request is counted in the metrics.
pub async fn run(config: kube::Config, cfg: RunConfig, shutdown: Shutdown) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new()?);
    let client = super::client::client(config, metrics.clone(), cfg.max_requests_in_flight)
        .map_err(RunError::Client)?;
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

    // Before the API check: with objects stored in another version, even
    // listing them needs a webhook, and this replica may be the only one.
    let webhook = match cfg.webhook.clone() {
        Some(w) => {
            // The webhook outlives the signal a little: the API server may
            // still send this pod conversions until the endpoint removal
            // reaches it, and a refused one fails the client's request.
            let stop = shutdown.clone().wait();
            let stop = async move {
                stop.await;
                tokio::time::sleep(WEBHOOK_DRAIN).await;
            };
            let start = webhook::start(client.clone(), w, cfg.convert, stop);
            match tokio::time::timeout(cfg.startup_timeout, start).await {
                Ok(running) => Some(running?),
                Err(_) => return Err(RunError::WebhookTimeout(cfg.startup_timeout)),
            }
        }
        None => None,
    };

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

    // Migration lists and rewrites every ModelService, and edits the CRD: an
    // operator confined to one namespace sees too little to finish it.
    if ns.is_none() {
        tokio::spawn(storage_migration::run(
            client.clone(),
            leadership.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
    }

    let (stores, writers) = Stores::new();
    let (ms_store, ms_writer) = reflector::store::<Guarded<ModelService>>();
    // Bounded: discovery must not hold up a start whose API server is slow;
    // a later round finds what this one missed.
    let _ = tokio::time::timeout(cfg.startup_timeout, discovery::initial(&client, &stores)).await;
    {
        let (main, children) = (ms_store.clone(), stores.clone());
        tokio::spawn(async move {
            if synced(&main).await && children.wait_ready().await {
                info!("caches synced; ready");
                readiness.set_ready();
                let handed = code_pages::hand_back();
                info!(
                    kib = handed.bytes / 1024,
                    evicted = handed.evicted,
                    "handed back the pages of code and read-only data mapped at start"
                );
            }
        });
    }

    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: cfg.reporter_instance.clone(),
    };
    let (events, publisher) = Events::new(
        client.clone(),
        reporter,
        metrics.clone(),
        cfg.controller.events_queue,
    );
    let publisher = tokio::spawn(publisher);
    let ctx = Arc::new(Context::new(
        client.clone(),
        stores,
        cfg.controller.clone(),
        metrics.clone(),
        events,
        leadership,
    ));

    let ms_stream = watches::watch(
        api::<Guarded<ModelService>>(&client, ns),
        watcher::Config::default().page_size(cfg.controller.list_page_size),
        ms_writer,
        // Nobody asks how far this watch has got: a reconcile judges the
        // copy it was handed (see `controller::recent::newer_than_object`).
        Arc::default(),
        metrics.clone(),
        trim::<Guarded<ModelService>>,
    )
    .inspect(forget_deleted(ctx.clone()))
    .applied_objects();
    let ms_stream = without_echoes(ms_stream, ctx.clone());

    let acquired = election.as_ref().map(|e| e.acquired.clone());
    let leader_trigger = futures::stream::unfold(acquired, |rx| async move {
        let mut rx = rx?;
        rx.changed().await.ok()?;
        let is_leader = *rx.borrow_and_update();
        Some((is_leader, Some(rx)))
    })
    .filter_map(|lead| async move { lead.then_some(()) });
    // An optional API that appears: the ModelServices waiting for it go again.
    let api_appeared = discovery::run(
        client.clone(),
        ctx.stores.clone(),
        cfg.controller.discovery_interval,
    );

    // One that goes: the ModelServices using it say so now.
    let api_gone = discovery::gone(&ctx.stores);

    let mut owned = OwnedWatches {
        controller: Some(Controller::for_stream(ms_stream, ms_store)),
        client: &client,
        namespace: ns,
        metrics: &metrics,
        ctx: &ctx,
        page: cfg.controller.list_page_size,
    };
    let pod_writer = writers.each(&ctx.stores, &mut owned);
    let Some(controller) = owned.controller else {
        return Ok(());
    };
    let controller = controller.watches_stream(
        watches::pod_watch(
            api::<PodView>(&client, ns),
            cfg.controller.list_page_size,
            pod_writer,
            ctx.stores.pods.fresh.clone(),
            metrics.clone(),
        ),
        |pod: PodView| pod.owner::<Guarded<ModelService>>(),
    );
    let controller = controller
        .trigger_backoff(watches::NoTriggerBackoff)
        .with_config(ControllerRuntimeConfig::default().concurrency(cfg.controller.concurrency))
        .reconcile_all_on(futures::stream::select(
            leader_trigger,
            futures::stream::select(api_appeared, api_gone),
        ))
        .graceful_shutdown_on(shutdown.clone().wait())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            match res {
                // Watch errors are logged where they happen, with their
                // resource (see `watches`); reconcile errors in `reconcile`.
                Err(
                    kube::runtime::controller::Error::QueueError(_)
                    | kube::runtime::controller::Error::ReconcilerFailed(..)
                    | kube::runtime::controller::Error::ObjectNotFound(_),
                ) => {}
                Err(e) => warn!(error = %e, "controller failure"),
                Ok(_) => {}
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
    // The last queued events go out before the lease is released.
    drop(ctx);
    let mut publisher = publisher;
    if tokio::time::timeout(Duration::from_secs(2), &mut publisher)
        .await
        .is_err()
    {
        // Whatever is still queued is dropped: a former leader sends nothing.
        publisher.abort();
    }
    if let Some(e) = election {
        e.release().await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    if let Some(w) = webhook {
        let _ = tokio::time::timeout(WEBHOOK_DRAIN + Duration::from_secs(5), w.handle).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::trim;
    use crate::controller::lean::LAST_APPLIED;
    use k8s_openapi::api::apps::v1::Deployment;

    #[test]
    fn trimming_keeps_everything_but_managed_fields_and_the_last_applied_copy() {
        let mut d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m", "annotations": {LAST_APPLIED: "{...}", "modelservice.dev/applied-fingerprint": "f"},
                "managedFields": [{"manager": "x", "operation": "Apply"}]},
            "spec": {"selector": {}, "template": {}}
        }))
        .unwrap_or_default();
        trim(&mut d);
        assert_eq!(d.metadata.managed_fields, None);
        let annotations = d.metadata.annotations.unwrap_or_default();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(
            annotations
                .get("modelservice.dev/applied-fingerprint")
                .map(String::as_str),
            Some("f")
        );
    }
}
