//! What every reconcile shares: the client, the child caches, metrics,
//! the event recorder and whether this replica may write.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::Client;
use kube::runtime::reflector::Store;

use super::children::Stores;
use super::freshness::Freshness;
use crate::metrics::Metrics;

/// Timing and concurrency of the controller.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Requeue of a settled object: a safety net for missed events.
    pub resync: Duration,
    /// Requeue of an object that is not Ready: the safety net of level
    /// triggering. Everything that moves a model towards Ready reaches it
    /// through a watch (its children, pods whose diagnosis changes) or a
    /// timed look of its own (a paced status, a surge's grace, a download,
    /// a canary's wait), so this catches only what a watch missed. It was
    /// 20 s: with 10,000 models waiting for GPUs that was 500 reconciles a
    /// second finding nothing, and they were due before new ModelServices in
    /// the queue (most of the 11 reconciles per object of a cold start).
    pub not_ready_requeue: Duration,
    /// The least time between two status writes of one object whose only
    /// difference is progress (see `core::pacing`).
    pub status_pace: Duration,
    /// How long a new generation's first status waits for its verdict (see
    /// `core::pacing`).
    pub first_report_wait: Duration,
    /// Reconciles in flight at once.
    pub concurrency: u16,
    /// Events kept in order before further ones wait by object and reason
    /// (see `events`).
    pub events_queue: usize,
    /// How often optional APIs are looked for again (see `runtime::discovery`).
    pub discovery_interval: Duration,
    /// How long a surge pod may wait for GPUs before the rollout replaces
    /// (see `core::refutation`).
    pub surge_grace: Duration,
    /// How long one read of the cluster serves surge decisions (see
    /// `controller::surge`).
    pub surge_read_window: Duration,
    /// Objects per page when a watch of ModelServices, their children or
    /// their pods lists (see `runtime::reflect`).
    pub list_page_size: u32,
    /// What the operator's flags add to every spec.
    pub defaults: crate::core::OperatorDefaults,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(300),
            not_ready_requeue: Duration::from_secs(120),
            status_pace: Duration::from_secs(2),
            first_report_wait: Duration::ZERO,
            concurrency: 32,
            events_queue: super::events::QUEUE,
            discovery_interval: Duration::from_secs(30),
            surge_grace: Duration::from_secs(10),
            surge_read_window: Duration::from_secs(5),
            list_page_size: 100,
            defaults: Default::default(),
        }
    }
}

/// One reflector cache, how far its watch has got (see `freshness`), and
/// whether its API is served at all (always, but for optional kinds: see
/// `children::Child::OPTIONAL`).
#[derive(Clone)]
pub struct Cache<K: kube::runtime::reflector::Lookup + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub store: Store<K>,
    pub fresh: Arc<Freshness>,
    available: Arc<tokio::sync::watch::Sender<bool>>,
}

impl<K> Cache<K>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// A cache whose API is served from the start, unless `optional`: then
    /// it waits for discovery to find it.
    pub fn new(store: Store<K>, optional: bool) -> Self {
        Self {
            store,
            fresh: Arc::default(),
            available: Arc::new(tokio::sync::watch::Sender::new(!optional)),
        }
    }

    /// Whether the API server serves this kind now.
    pub fn available(&self) -> bool {
        *self.available.borrow()
    }

    /// Discovery found the API served, or gone. True when that is news.
    pub fn set_available(&self, served: bool) -> bool {
        self.available.send_if_modified(|now| {
            let changed = *now != served;
            *now = served;
            changed
        })
    }

    /// The API server answered 404 for this kind (an apply, or the watch):
    /// its API is gone now, whatever discovery last said. True when that
    /// is news. Discovery finds it again when it comes back.
    pub fn refute(&self) -> bool {
        self.set_available(false)
    }

    /// Follows [`Cache::available`], for the watch that runs only while it holds.
    pub fn availability(&self) -> tokio::sync::watch::Receiver<bool> {
        self.available.subscribe()
    }
}

/// Waits until `store` has done its first list; false if its writer is gone.
///
/// `Store::wait_until_ready` wakes only the most recent of several concurrent
/// waiters (its one-shot receiver keeps one waker), and the Controller itself
/// waits on the main store. Re-polling on a short timer makes every waiter
/// see readiness, at the cost of at most one timer tick of delay.
pub async fn synced<K>(store: &Store<K>) -> bool
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready()).await {
            Ok(result) => return result.is_ok(),
            Err(_elapsed) => continue,
        }
    }
}

/// Whether this replica holds the lease. Without leader election it always does.
#[derive(Clone, Debug)]
pub struct Leadership(Arc<AtomicBool>);

impl Leadership {
    pub fn new(leader: bool) -> Self {
        Self(Arc::new(AtomicBool::new(leader)))
    }
    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
    pub fn set(&self, leader: bool) {
        self.0.store(leader, Ordering::Release);
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub config: ControllerConfig,
    pub metrics: Arc<Metrics>,
    pub events: super::events::Events,
    pub leadership: Leadership,
    /// Unreadable objects already reported, by namespace/name, with what was
    /// reported: so one bad object costs one status write, not one per resync.
    pub reported_invalid: std::sync::Mutex<HashMap<String, String>>,
    /// Fingerprints of children we applied, until the caches show them.
    pub applied: super::recent::Recent<String>,
    /// Children known to hold what we apply, by resourceVersion.
    pub verified: super::verified::Verified,
    /// Our finalizer patches, until the ModelService cache shows them.
    pub finalized: super::recent::Recent<()>,
    /// Statuses we wrote, until the ModelService cache shows them.
    pub written_status: super::recent::Recent<crate::api::ModelServiceStatus>,
    /// What our writes produced, until their watch events come back.
    pub echoes: super::echoes::Echoes,
    /// When we last wrote each status, for the pace of progress.
    pub status_writes: super::report::StatusWrites,
    /// Consecutive failures by namespace/name, for the error backoff.
    pub failures: super::backoff::Failures,
    /// Surge decisions we applied, and the last read of free GPUs.
    pub surge: super::surge::Memory,
    /// The leaders of each group seen, for recreations.
    pub recreations: super::groups::Recreations,
    /// The last reading of each download (see `download`).
    pub downloads: super::download::Downloads,
}

/// The key of the per-object tables below: `namespace/name`.
pub fn object_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Context {
    /// Everything a reconcile needs, with empty per-object memory. The
    /// binary builds one in `runtime::run`; tests build one around a fake
    /// API server's client and call `reconcile` directly.
    pub fn new(
        client: Client,
        stores: Stores,
        config: ControllerConfig,
        metrics: Arc<Metrics>,
        events: super::events::Events,
        leadership: Leadership,
    ) -> Self {
        Self {
            client,
            stores,
            config,
            metrics,
            events,
            leadership,
            reported_invalid: Default::default(),
            applied: Default::default(),
            verified: Default::default(),
            finalized: Default::default(),
            written_status: Default::default(),
            echoes: Default::default(),
            status_writes: Default::default(),
            failures: Default::default(),
            surge: Default::default(),
            recreations: Default::default(),
            downloads: Default::default(),
        }
    }

    /// A reconcile of `namespace/name` succeeded: its error backoff starts
    /// again from the shortest delay. `readable`: it was a ModelService, so a
    /// report that it was unreadable no longer stands (an unreadable one
    /// keeps it, so that it is reported once, not at every resync).
    pub fn succeeded(&self, namespace: &str, name: &str, readable: bool) {
        self.failures.forget(namespace, name);
        if readable && let Ok(mut m) = self.reported_invalid.lock() {
            m.remove(&object_key(namespace, name));
        }
    }

    /// A watch delivered `obj`: the writes of ours it already holds need no
    /// stand-in any more. Without this, a remembered status (a whole copy)
    /// waited for the object's next reconcile to be dropped, and since our
    /// own echoes start none, that was the next requeue: at 10,000
    /// ModelServices, tens of MB held for nothing. A reconcile already
    /// running on an older copy then compares with that copy; a status
    /// write that announces is conditional on it and fails (409), so nothing
    /// is announced twice.
    pub fn caught_up<K: kube::Resource<DynamicType = ()>>(&self, obj: &K) {
        let meta = obj.meta();
        let key = super::recent::key(
            &K::kind(&()),
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        );
        let rv = meta.resource_version.as_deref();
        if K::kind(&()) == "ModelService" {
            self.written_status.newer_than_object(&key, rv);
            self.finalized.newer_than_object(&key, rv);
        } else {
            self.applied.newer_than_object(&key, rv);
        }
    }

    /// The ModelService is gone (its watch delivered the deletion), or its
    /// cleanup runs: nothing kept per object may outlive it, whether or not
    /// a cleanup ran. Every per-object table is forgotten here, in one place.
    pub fn forget_object(&self, namespace: &str, name: &str) {
        self.succeeded(namespace, name, true);
        let key = super::recent::key("ModelService", namespace, name);
        self.written_status.forget(&key);
        self.status_writes.forget(&key);
        self.finalized.forget(&key);
        self.echoes.forget(&key);
        super::apply::forget(self, namespace, name);
        self.surge.forget(namespace, name);
        self.recreations.forget(namespace, name);
        self.downloads.forget(namespace, name);
        self.metrics.forget(namespace, name);
    }
}
