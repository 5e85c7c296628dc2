//! The object store: every object of every type, behind one mutex.
//!
//! One global resourceVersion counter, per-type ordered maps of objects, a
//! bounded per-type event history for watches, and two indexes (uid → object,
//! owner uid → dependents) so garbage collection never scans everything.
//! Request handlers lock it briefly, never across an `.await`; serialization
//! of responses happens after the lock is released (objects are `Arc`s).

mod event;
mod write;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{Notify, broadcast};

pub use event::{ChangeEvent, Event, EventType, watch_line};

use crate::resources::{ResKey, ResourceInfo};

/// Capacity of each per-type watch broadcast; a watcher that falls further
/// behind is disconnected (like the real server's "too slow" watchers).
const WATCH_BUFFER: usize = 16 * 1024;

/// Where one object lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    pub res: ResKey,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

/// All objects and watch state of one resource type.
pub struct ResourceState {
    pub info: Arc<ResourceInfo>,
    /// Keyed by (namespace, name): lists come out sorted like the real server's.
    pub objects: BTreeMap<(String, String), Arc<Value>>,
    pub history: VecDeque<Arc<Event>>,
    /// Watches from a resourceVersion below this get 410 Gone.
    pub compacted: u64,
    pub tx: broadcast::Sender<Arc<Event>>,
}

impl ResourceState {
    fn new(info: ResourceInfo, compacted: u64) -> Self {
        ResourceState {
            info: Arc::new(info),
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted,
            tx: broadcast::channel(WATCH_BUFFER).0,
        }
    }
}

/// Work for the garbage collector, queued by writes.
#[derive(Default)]
pub struct GcQueue {
    /// Uids of removed objects whose dependents must be re-examined.
    pub owners_gone: Vec<String>,
    /// Objects whose owners may not exist (created with a dangling owner).
    pub check: Vec<ObjKey>,
    /// Terminating namespaces to empty.
    pub namespaces: Vec<String>,
    /// Objects being deleted in the foreground.
    pub foreground: Vec<ObjKey>,
}

impl GcQueue {
    pub fn is_empty(&self) -> bool {
        self.owners_gone.is_empty()
            && self.check.is_empty()
            && self.namespaces.is_empty()
            && self.foreground.is_empty()
    }
}

/// Namespace lifecycle as seen by creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespacePhase {
    Missing,
    Active,
    Terminating,
}

pub struct Store {
    /// The last resourceVersion handed out.
    pub rv: u64,
    pub resources: HashMap<ResKey, ResourceState>,
    pub uids: HashMap<String, ObjKey>,
    pub dependents: HashMap<String, HashSet<ObjKey>>,
    pub gc: GcQueue,
    pub gc_wake: Arc<Notify>,
    pub changes: broadcast::Sender<ChangeEvent>,
    pub history_limit: usize,
    /// Names of CRDs whose type the CRD controller must bring in line.
    pub crds_pending: BTreeSet<String>,
    pub crd_wake: Arc<Notify>,
}

impl Store {
    pub fn new(resources: Vec<ResourceInfo>, gc_wake: Arc<Notify>, history_limit: usize) -> Self {
        let mut store = Store {
            rv: 0,
            resources: HashMap::new(),
            uids: HashMap::new(),
            dependents: HashMap::new(),
            gc: GcQueue::default(),
            gc_wake,
            changes: broadcast::channel(WATCH_BUFFER).0,
            history_limit,
            crds_pending: BTreeSet::new(),
            crd_wake: Arc::new(Notify::new()),
        };
        for info in resources {
            store.install(info);
        }
        store
    }

    /// Registers a type (idempotent: an installed type keeps its objects).
    pub fn install(&mut self, info: ResourceInfo) {
        let key = info.key();
        if let Some(state) = self.resources.get_mut(&key) {
            state.info = Arc::new(info);
        } else {
            let compacted = self.rv;
            self.resources
                .insert(key, ResourceState::new(info, compacted));
        }
    }

    /// Unregisters a type: like deleting a CRD, its objects are gone and its
    /// watches end.
    pub fn uninstall(&mut self, key: &ResKey) -> bool {
        let Some(state) = self.resources.remove(key) else {
            return false;
        };
        for obj in state.objects.values() {
            let uid = crate::meta::uid(obj);
            self.uids.remove(uid);
            if self.dependents.contains_key(uid) {
                self.gc.owners_gone.push(uid.to_string());
            }
        }
        if !self.gc.is_empty() {
            self.gc_wake.notify_one();
        }
        true
    }

    /// Finds an installed type by group and plural.
    pub fn info(&self, group: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.resources
            .get(&ResKey::new(group, plural))
            .map(|s| s.info.clone())
    }

    pub fn get(&self, key: &ObjKey) -> Option<Arc<Value>> {
        self.resources
            .get(&key.res)?
            .objects
            .get(&(key.namespace.clone(), key.name.clone()))
            .cloned()
    }

    pub fn namespace_phase(&self, ns: &str) -> NamespacePhase {
        let key = ObjKey {
            res: ResKey::new("", "namespaces"),
            namespace: String::new(),
            name: ns.to_string(),
        };
        match self.get(&key) {
            None => NamespacePhase::Missing,
            Some(obj) if crate::meta::is_deleting(&obj) => NamespacePhase::Terminating,
            Some(_) => NamespacePhase::Active,
        }
    }

    /// Ends every open watch (their broadcast senders are replaced).
    pub fn drop_watches(&mut self) {
        for state in self.resources.values_mut() {
            state.tx = broadcast::channel(WATCH_BUFFER).0;
        }
    }

    /// Ends the watches of the types `which` picks and forgets their
    /// history: re-watches from before now get 410. Whether any matched.
    pub fn expire(&mut self, which: impl Fn(&ResourceInfo) -> bool) -> bool {
        let rv = self.rv;
        let mut found = false;
        for state in self.resources.values_mut().filter(|s| which(&s.info)) {
            state.history.clear();
            state.compacted = rv;
            state.tx = broadcast::channel(WATCH_BUFFER).0;
            found = true;
        }
        found
    }

    /// Keys of the objects that name `uid` as an owner.
    pub fn dependents_of(&self, uid: &str) -> Vec<ObjKey> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

pub(crate) use write::is_foreground_deleting;
