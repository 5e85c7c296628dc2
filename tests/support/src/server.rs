//! `FakeApiServer`: the handle tests hold.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::counts::{RequestCounts, Verb};
use crate::faults::FailRule;
use crate::resources::{Converter, ResKey, ResourceInfo, default_resources};
use crate::shared::Shared;
use crate::store::{ChangeEvent, Store};

/// How long a restart turns clients away: a real kube-apiserver is back
/// about 3 s after it is killed.
pub const RESTART_OUTAGE: Duration = Duration::from_secs(3);

/// Namespaces a fresh cluster has.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// An in-process fake Kubernetes API server. Cheap to clone; it stops
/// serving TCP (and its garbage collector stops) when the last clone drops.
#[derive(Clone)]
pub struct FakeApiServer {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    router: Router,
    addr: SocketAddr,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
        self.shared.lock().drop_watches();
    }
}

/// Options for [`FakeApiServer::builder`].
pub struct Builder {
    resources: Vec<ResourceInfo>,
    bookmark_interval: Duration,
    history_limit: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            resources: default_resources(),
            // A real apiserver sends a watch bookmark about once a minute.
            bookmark_interval: Duration::from_secs(60),
            history_limit: 50_000,
        }
    }
}

impl Builder {
    /// Leaves a type out (e.g. `"modelservices"`: the CRD is not installed).
    pub fn without_resource(mut self, plural: &str) -> Self {
        self.resources.retain(|r| !matches_name(r, plural));
        self
    }

    /// Adds or replaces a type.
    pub fn with_resource(mut self, info: ResourceInfo) -> Self {
        self.resources.retain(|r| r.key() != info.key());
        self.resources.push(info);
        self
    }

    /// Converts the versions of a type (`plural` or `plural.group`) with
    /// `hook`, as the CRD's conversion webhook would; without one,
    /// conversion only rewrites `apiVersion` (`strategy: None`).
    pub fn with_converter(mut self, name: &str, hook: Converter) -> Self {
        for r in self.resources.iter_mut().filter(|r| matches_name(r, name)) {
            *r = r.clone().with_converter(hook.clone());
        }
        self
    }

    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every;
        self
    }

    /// Events kept per type for watches from an old resourceVersion.
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = events.max(1);
        self
    }

    pub async fn start(self) -> FakeApiServer {
        FakeApiServer::start_with(self).await
    }
}

/// `plural` or `plural.group` names this type.
fn matches_name(info: &ResourceInfo, name: &str) -> bool {
    info.plural == name || info.group_resource() == name
}

impl FakeApiServer {
    /// Starts serving on 127.0.0.1:<random port> and in-process, with the
    /// default resource table and namespaces `default`, `kube-system`,
    /// `kube-public` and `kube-node-lease`.
    pub async fn start() -> FakeApiServer {
        Builder::default().start().await
    }

    pub fn builder() -> Builder {
        Builder::default()
    }

    async fn start_with(b: Builder) -> FakeApiServer {
        let gc_wake = Arc::new(Notify::new());
        let store = Store::new(b.resources, gc_wake.clone(), b.history_limit);
        let shared = Arc::new(Shared::new(store, gc_wake, b.bookmark_interval));
        {
            let mut store = shared.lock();
            if let Some(info) = store.info("", "namespaces") {
                let ctx = crate::ops::Ctx::new(info, "", crate::ops::Sub::Main, "kube-apiserver");
                for ns in INITIAL_NAMESPACES {
                    let obj = serde_json::json!({"metadata": {"name": ns}});
                    let _ = crate::ops::create::create(
                        &mut store,
                        &ctx,
                        obj,
                        crate::ops::create::Ownership::Creator,
                    );
                }
            }
        }
        crate::gc::spawn(shared.clone());
        crate::crds::spawn(shared.clone());
        let router = crate::http::router(shared.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("binding a loopback port for the fake API server");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let serve_router = crate::http::tcp_router(shared.clone());
        let serve_shared = shared.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = axum::serve(listener, serve_router) => {}
                _ = serve_shared.stopped() => {}
            }
        });
        FakeApiServer {
            inner: Arc::new(Inner {
                shared,
                router,
                addr,
            }),
        }
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// A client talking to the fake in-process (no sockets), default
    /// namespace `default`. Must be called inside a tokio runtime.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.inner.router.clone(), "default")
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Writes a kubeconfig (server: [`Self::url`], no auth, namespace default).
    pub fn write_kubeconfig(&self, path: &std::path::Path) -> std::io::Result<()> {
        crate::kubeconfig::write(path, &self.url())
    }

    /// A snapshot of the request counters.
    pub fn counts(&self) -> RequestCounts {
        self.shared().counter.snapshot()
    }

    /// A snapshot of the counters of requests that came over TCP (through
    /// [`Self::url`]), such as those of an operator binary under test.
    pub fn tcp_counts(&self) -> RequestCounts {
        self.shared().tcp_counter.snapshot()
    }

    /// The most objects one list response of `resource` (as in
    /// [`Self::counts`]) has held, of the lists that asked for pages
    /// (`limit`): what a client's page size let through.
    pub fn largest_list(&self, resource: &str) -> usize {
        self.shared().pages.largest(resource)
    }

    pub fn reset_counts(&self) {
        self.shared().counter.reset();
        self.shared().tcp_counter.reset();
    }

    /// Fails the next `rule.times` matching requests with `rule.code`
    /// (after they are counted). Rules are consumed in the order added.
    pub fn fail_next(&self, rule: FailRule) {
        self.shared().faults.add(rule);
    }

    /// Forgets pending [`FailRule`]s.
    pub fn clear_faults(&self) {
        self.shared().faults.clear();
    }

    /// Ends every open watch stream now; clients must re-watch.
    pub fn drop_watches(&self) {
        self.shared().lock().drop_watches();
    }

    /// Holds every request and every watch delivery until [`Self::resume`].
    /// Connections are still accepted.
    pub fn pause(&self) {
        self.shared().gate.pause();
    }

    pub fn resume(&self) {
        self.shared().gate.resume();
    }

    /// Holds every request of `verb` on `resource` (a plural, with its
    /// subresource) until [`Self::release`]; everything else is served.
    pub fn hold(&self, verb: Verb, resource: &str) {
        self.shared().holds.hold(verb, resource);
    }

    pub fn release(&self, verb: Verb, resource: &str) {
        self.shared().holds.release(verb, resource);
    }

    /// Holds the later pages of every paginated list of `resource` (a
    /// request with a continue token) until [`Self::release_pages`]; first
    /// pages are served. A client's relist then stops between pages.
    pub fn hold_pages(&self, resource: &str) {
        self.shared().holds.hold(Verb::List, &continued(resource));
    }

    pub fn release_pages(&self, resource: &str) {
        self.shared()
            .holds
            .release(Verb::List, &continued(resource));
    }

    /// Like an API server restart, as `../shared/k8s/restart kube-apiserver`
    /// does it to a real one: all watches end, clients over TCP are turned
    /// away for [`RESTART_OUTAGE`], and the event history is compacted (a
    /// restarted server's watch cache starts at the current
    /// resourceVersion), so a re-watch from an older one gets 410 Gone and
    /// must relist. Stored objects survive (etcd does). Returns at once;
    /// [`Self::restarted`] waits the outage out.
    pub fn restart(&self) {
        self.shared().lock().expire(|_| true);
        self.shared().outage.start(RESTART_OUTAGE);
    }

    /// Ends every watch of one type (by `plural` or `plural.group`) and
    /// forgets its event history, as a real server does to a watcher that
    /// fell behind a compaction: the watch ends, and a re-watch from any
    /// older resourceVersion gets 410 Gone and must relist. The other types'
    /// watches go on. Returns whether any type matched.
    pub fn expire_watches(&self, name: &str) -> bool {
        self.shared().lock().expire(|info| matches_name(info, name))
    }

    /// Whether a restart's outage still turns clients over TCP away.
    pub fn is_down(&self) -> bool {
        self.shared().outage.is_down()
    }

    /// Restarts and returns once the server answers again, as the real
    /// `restart` script does.
    pub async fn restarted(&self) {
        self.restart();
        while self.is_down() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Registers (or replaces) a resource type, e.g. installs a CRD.
    pub fn install_resource(&self, info: ResourceInfo) {
        self.shared().lock().install(info);
    }

    /// Replaces (`None`: removes) the conversion hook of a type, by `plural`
    /// or `plural.group`, keeping its objects — like editing the CRD's
    /// `conversion` stanza, or its webhook starting or stopping to fail.
    /// Returns whether any type matched.
    pub fn set_converter(&self, name: &str, hook: Option<Converter>) -> bool {
        let mut store = self.shared().lock();
        let infos: Vec<ResourceInfo> = store
            .resources
            .values()
            .filter(|s| matches_name(&s.info, name))
            .map(|s| {
                let info = (*s.info).clone();
                match &hook {
                    Some(h) => info.with_converter(h.clone()),
                    None => info.without_converter(),
                }
            })
            .collect();
        let found = !infos.is_empty();
        for info in infos {
            store.install(info);
        }
        found
    }

    /// Removes a type by `plural` or `plural.group`, deleting its objects
    /// and ending its watches (like deleting a CRD). Returns whether any
    /// type was removed.
    pub fn uninstall_resource(&self, name: &str) -> bool {
        let mut store = self.shared().lock();
        let keys: Vec<ResKey> = store
            .resources
            .values()
            .filter(|s| matches_name(&s.info, name))
            .map(|s| s.info.key())
            .collect();
        keys.iter().filter(|k| store.uninstall(k)).count() > 0
    }

    /// The stored object, if any (`ns` is `""` for cluster-scoped types), at
    /// the storage version.
    pub fn get_object(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let key = crate::store::ObjKey {
            res: ResKey::new(group, plural),
            namespace: ns.to_string(),
            name: name.to_string(),
        };
        self.shared().lock().get(&key).map(|o| (*o).clone())
    }

    /// Every stored object of a type, ordered by namespace and name, at the
    /// storage version.
    pub fn list_objects(&self, group: &str, plural: &str) -> Vec<Value> {
        let store = self.shared().lock();
        store
            .resources
            .get(&ResKey::new(group, plural))
            .map(|s| s.objects.values().map(|o| (**o).clone()).collect())
            .unwrap_or_default()
    }

    /// How many stored objects of a type satisfy `pred`, without copying
    /// them: cheap enough to poll while a benchmark runs.
    pub fn count_objects(&self, group: &str, plural: &str, pred: impl Fn(&Value) -> bool) -> usize {
        let store = self.shared().lock();
        store
            .resources
            .get(&ResKey::new(group, plural))
            .map(|s| s.objects.values().filter(|o| pred(o)).count())
            .unwrap_or(0)
    }

    /// Every stored change from now on, across all types, in order — for
    /// in-process observers such as a workload simulator. A receiver that
    /// falls more than 16k events behind gets `Lagged` and should resync
    /// from [`Self::list_objects`].
    pub fn on_change(&self) -> broadcast::Receiver<ChangeEvent> {
        self.shared().lock().changes.subscribe()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared().lock().rv
    }
}

/// The hold label of the later pages of `resource`'s lists.
pub(crate) fn continued(resource: &str) -> String {
    format!("{resource} (continued)")
}
