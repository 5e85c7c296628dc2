//! What each node has and what its pods hold of every extended resource
//! (GPUs), kept from two watches: the surge decision's view of the cluster.
//!
//! The decision used to list every pod of the cluster, page by page, when a
//! rollout started (shared by the rollouts of a few seconds). A change that
//! rolled out 10,000 models read the cluster 407 times, and each read cost
//! O(every pod). Here the pods are watched once and reduced as they come to
//! per-node sums, so a decision costs O(nodes), and a pod's own rollout reads
//! only its own pods (see `surge::judged`).
//!
//! Started by the first decision that needs free GPUs, not at startup: an
//! operator whose models never surge on GPUs pays nothing for it. That first
//! decision waits for both lists; if one fails first, it replaces and says
//! why, as a failed read did. Once synced, the watches keep it current and a
//! later watch error leaves the last known state (the scheduler judges every
//! surge anyway: see `core::refutation`).
//!
//! Each pod keeps only its node and what it requests of resources with a
//! domain (`nvidia.com/gpu`; not cpu or memory): about 200 bytes per pod.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_fn};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::info;

use super::pod_usage::UsagePod;
use crate::core::surge;
use crate::metrics::Metrics;
use crate::runtime::watches;

/// Pods that hold their resources: a finished pod's are free again.
pub const ACTIVE_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// How far the two watches have got.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Sync {
    Starting,
    /// A list failed before both were done: why, in the API server's words.
    Failed(String),
    Synced,
}

/// What one pod holds: its node, and per extended resource, milli-units.
#[derive(Debug, Clone, PartialEq)]
struct Held {
    node: String,
    resources: Vec<(String, i128)>,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Node>,
    pods: HashMap<String, Held>,
    /// Per node, per resource: the sum of `pods`.
    used: HashMap<String, HashMap<String, i128>>,
    /// A relist in progress: its items replace the others when it ends.
    relisting_nodes: Option<HashMap<String, Node>>,
    relisting_pods: Option<HashMap<String, Held>>,
    nodes_listed: bool,
    pods_listed: bool,
}

impl State {
    fn add(&mut self, h: &Held, sign: i128) {
        let node = self.used.entry(h.node.clone()).or_default();
        for (resource, milli) in &h.resources {
            *node.entry(resource.clone()).or_insert(0) += sign * milli;
        }
        node.retain(|_, v| *v != 0);
        if node.is_empty() {
            self.used.remove(&h.node);
        }
    }

    fn put_pod(&mut self, key: String, held: Option<Held>) {
        if let Some(old) = self.pods.remove(&key) {
            self.add(&old, -1);
        }
        if let Some(h) = held {
            self.add(&h, 1);
            self.pods.insert(key, h);
        }
    }

    fn replace_pods(&mut self, pods: HashMap<String, Held>) {
        self.used.clear();
        for h in pods.values() {
            let node = self.used.entry(h.node.clone()).or_default();
            for (resource, milli) in &h.resources {
                *node.entry(resource.clone()).or_insert(0) += milli;
            }
        }
        self.pods = pods;
    }
}

/// The cluster's nodes and GPU use, once started.
pub struct Ledger {
    state: Mutex<State>,
    sync: watch::Sender<Sync>,
    started: std::sync::Once,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            sync: watch::Sender::new(Sync::Starting),
            started: std::sync::Once::new(),
        }
    }
}

/// The nodes (as `surge::slim` keeps them) and what their pods hold of one
/// resource, in milli-units, per node.
pub struct Snapshot {
    pub nodes: Vec<Node>,
    pub used: BTreeMap<String, i128>,
    pub pods: usize,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current view of `resource`, starting the watches on first use and
    /// waiting for their lists; the first failure before that is the error.
    pub async fn snapshot(
        self: &Arc<Self>,
        client: &Client,
        metrics: &Arc<Metrics>,
        resource: &str,
    ) -> Result<Snapshot, String> {
        self.start(client, metrics);
        let mut rx = self.sync.subscribe();
        let sync = rx
            .wait_for(|s| *s != Sync::Starting)
            .await
            .map(|s| s.clone())
            .map_err(|_| "the watches of nodes and pods ended".to_string())?;
        if let Sync::Failed(why) = sync {
            return Err(why);
        }
        let s = self.lock();
        Ok(Snapshot {
            nodes: s.nodes.values().cloned().collect(),
            used: s
                .used
                .iter()
                .filter_map(|(node, r)| Some((node.clone(), *r.get(resource)?)))
                .collect(),
            pods: s.pods.len(),
        })
    }

    /// What the pods on `node` hold of `resource`, in milli-units.
    pub fn held_on(&self, node: &str, resource: &str) -> i128 {
        let s = self.lock();
        s.used
            .get(node)
            .and_then(|r| r.get(resource))
            .copied()
            .unwrap_or(0)
    }

    fn start(self: &Arc<Self>, client: &Client, metrics: &Arc<Metrics>) {
        self.started.call_once(|| {
            let nodes = watches::reported(
                watch_fn(Api::<Node>::all(client.clone()), in_pages()),
                "nodes".into(),
                metrics.clone(),
            )
            .default_backoff();
            let pods = watches::reported(
                watch_fn(
                    Api::<UsagePod>::all(client.clone()),
                    in_pages().fields(ACTIVE_PODS),
                ),
                "pods (all namespaces)".into(),
                metrics.clone(),
            )
            .default_backoff();
            tokio::spawn(self.clone().follow(nodes, pods));
            info!("watching nodes and pods for the free GPUs of surge decisions");
        });
    }

    async fn follow(
        self: Arc<Self>,
        nodes: impl Stream<Item = Result<Event<Node>, watcher::Error>> + Send,
        pods: impl Stream<Item = Result<Event<UsagePod>, watcher::Error>> + Send,
    ) {
        let nodes = nodes.map(Either::Node);
        let pods = pods.map(Either::Pod);
        let mut both = std::pin::pin!(futures::stream::select(nodes, pods));
        while let Some(item) = both.next().await {
            match item {
                Either::Node(Ok(e)) => self.on_node(e),
                Either::Pod(Ok(e)) => self.on_pod(e),
                Either::Node(Err(e)) => self.failed("listing nodes", &e),
                Either::Pod(Err(e)) => self.failed("listing pods", &e),
            }
        }
    }

    /// A failure before both lists are done is what the waiting decisions
    /// say; after, the last known state stands while the watch retries.
    fn failed(&self, what: &str, e: &watcher::Error) {
        let why = match e {
            watcher::Error::InitialListFailed(kube::Error::Api(s)) => {
                format!("{what}: {} {}: {}", s.code, s.reason, s.message)
            }
            other => format!("{what}: {other}"),
        };
        self.sync.send_if_modified(|s| match s {
            Sync::Synced => false,
            _ => {
                *s = Sync::Failed(why);
                true
            }
        });
    }

    fn listed(&self, s: &State) {
        if s.nodes_listed && s.pods_listed {
            self.sync.send_if_modified(|s| {
                let changed = *s != Sync::Synced;
                *s = Sync::Synced;
                changed
            });
        }
    }

    fn on_node(&self, e: Event<Node>) {
        let mut s = self.lock();
        match e {
            Event::Init => s.relisting_nodes = Some(HashMap::new()),
            Event::InitApply(n) => {
                let name = n.name_any();
                s.relisting_nodes
                    .get_or_insert_default()
                    .insert(name, surge::slim(n));
            }
            Event::InitDone => {
                s.nodes = s.relisting_nodes.take().unwrap_or_default();
                s.nodes_listed = true;
                self.listed(&s);
            }
            Event::Apply(n) => {
                let name = n.name_any();
                s.nodes.insert(name, surge::slim(n));
            }
            Event::Delete(n) => {
                s.nodes.remove(&n.name_any());
            }
        }
    }

    fn on_pod(&self, e: Event<UsagePod>) {
        let mut s = self.lock();
        match e {
            Event::Init => s.relisting_pods = Some(HashMap::new()),
            Event::InitApply(p) => {
                if let Some(h) = held(&p.0) {
                    s.relisting_pods.get_or_insert_default().insert(key(&p), h);
                }
            }
            Event::InitDone => {
                let pods = s.relisting_pods.take().unwrap_or_default();
                s.replace_pods(pods);
                s.pods_listed = true;
                self.listed(&s);
            }
            Event::Apply(p) => s.put_pod(key(&p), held(&p.0)),
            Event::Delete(p) => s.put_pod(key(&p), None),
        }
    }
}

enum Either<N, P> {
    Node(N),
    Pod(P),
}

fn key(p: &UsagePod) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

/// What a pod holds: nothing until it is bound to a node, and nothing once
/// it ended.
fn held(pod: &Pod) -> Option<Held> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.clone()?;
    let mut names: Vec<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| {
            r.requests
                .iter()
                .chain(r.limits.iter())
                .flat_map(|m| m.keys())
        })
        .chain(spec.overhead.iter().flat_map(|o| o.keys()))
        .map(String::as_str)
        .filter(|name| name.contains('/'))
        .collect();
    names.sort_unstable();
    names.dedup();
    let resources: Vec<(String, i128)> = names
        .into_iter()
        .map(|name| (name.to_string(), surge::pod_request(pod, name)))
        .filter(|(_, milli)| *milli != 0)
        .collect();
    (!resources.is_empty()).then_some(Held { node, resources })
}

/// Objects per page of the ledger's lists: a page of pods is about half a
/// megabyte of JSON.
const LIST_PAGE: u32 = 100;

/// The ledger's watches list in pages of [`LIST_PAGE`]. A page's whole
/// response and every object decoded from it are held at once; at kube's
/// default of 500 pods (client-go's), the first surge decision's list was
/// the peak of a run of 1,000 ModelServices (BENCHMARKS.md, issue 36,
/// tenth round). Streaming lists (`sendInitialEvents`) would need no
/// pages, but their feature is off by default before Kubernetes 1.32, and
/// a watch that asks for them there is refused.
fn in_pages() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, gpus: &str, phase: &str) -> UsagePod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "4"}}}]},
            "status": {"phase": phase}}))
        .unwrap_or_default()
    }

    fn used(l: &Ledger, node: &str) -> Option<i128> {
        l.lock().used.get(node)?.get("nvidia.com/gpu").copied()
    }

    #[test]
    fn pods_add_to_their_node_and_free_it_when_they_go_move_or_end() {
        let l = Ledger::default();
        l.on_pod(Event::Init);
        l.on_pod(Event::InitApply(pod("a", Some("n1"), "2", "Running")));
        l.on_pod(Event::InitApply(pod("pending", None, "1", "Pending")));
        l.on_pod(Event::InitDone);
        assert_eq!(used(&l, "n1"), Some(2000));
        assert_eq!(l.lock().pods.len(), 1, "an unbound pod holds nothing");
        // The pending pod is bound: it holds its GPU now.
        l.on_pod(Event::Apply(pod("pending", Some("n1"), "1", "Pending")));
        assert_eq!(used(&l, "n1"), Some(3000));
        // Applied again unchanged: counted once.
        l.on_pod(Event::Apply(pod("pending", Some("n1"), "1", "Running")));
        assert_eq!(used(&l, "n1"), Some(3000));
        l.on_pod(Event::Apply(pod("a", Some("n1"), "2", "Succeeded")));
        assert_eq!(used(&l, "n1"), Some(1000));
        l.on_pod(Event::Delete(pod("pending", Some("n1"), "1", "Running")));
        assert_eq!(used(&l, "n1"), None);
        assert!(l.lock().used.is_empty() && l.lock().pods.is_empty());
    }

    #[test]
    fn a_relist_replaces_what_was_known_and_waits_for_both_lists() {
        let l = Ledger::default();
        l.on_pod(Event::Init);
        l.on_pod(Event::InitApply(pod("a", Some("n1"), "1", "Running")));
        l.on_pod(Event::InitDone);
        assert_eq!(
            *l.sync.borrow(),
            Sync::Starting,
            "the nodes are not listed yet"
        );
        l.on_node(Event::Init);
        l.on_node(Event::InitDone);
        assert_eq!(*l.sync.borrow(), Sync::Synced);
        // After an outage: the relist knows only b.
        l.on_pod(Event::Init);
        l.on_pod(Event::InitApply(pod("b", Some("n2"), "4", "Running")));
        assert_eq!(
            used(&l, "n1"),
            Some(1000),
            "the old state stands until the relist ends"
        );
        l.on_pod(Event::InitDone);
        assert_eq!((used(&l, "n1"), used(&l, "n2")), (None, Some(4000)));
    }

    #[test]
    fn a_failure_before_the_lists_is_said_and_one_after_is_not() {
        let l = Ledger::default();
        let forbidden = || {
            watcher::Error::InitialListFailed(kube::Error::Api(Box::new(
                kube::core::Status::failure("nodes is forbidden", "Forbidden").with_code(403),
            )))
        };
        l.failed("listing nodes", &forbidden());
        assert_eq!(
            *l.sync.borrow(),
            Sync::Failed("listing nodes: 403 Forbidden: nodes is forbidden".into())
        );
        for e in [Event::Init, Event::InitDone] {
            l.on_node(e.clone());
            l.on_pod(match e {
                Event::Init => Event::Init,
                _ => Event::InitDone,
            });
        }
        assert_eq!(*l.sync.borrow(), Sync::Synced);
        l.failed("listing nodes", &forbidden());
        assert_eq!(*l.sync.borrow(), Sync::Synced);
    }

    #[test]
    fn only_resources_with_a_domain_are_kept() {
        let h = held(&pod("a", Some("n1"), "1", "Running").0);
        assert_eq!(
            h,
            Some(Held {
                node: "n1".into(),
                resources: vec![("nvidia.com/gpu".into(), 1000)]
            })
        );
        assert_eq!(held(&pod("cpu", Some("n1"), "0", "Running").0), None);
    }
}
