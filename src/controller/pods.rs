//! The pods of every ModelService, from one watch instead of a list per
//! reconcile.
//!
//! Diagnosis (why a model does not serve) and the canary's rollback read the
//! pods while a rollout is under way. Listing them per reconcile cost one
//! request each time, and each list scans the namespace in the API server:
//! thousands of pods in one namespace made that grow as N². A watch selected
//! on our `managed-by` label costs one list at start and one stream, and its
//! cache keeps only what diagnosis reads: names, the two labels that say
//! whose pod it is, deletion, the `PodScheduled` condition and the container
//! states. The rest of a pod (its spec above all) is skipped while decoding,
//! never allocated (BENCHMARKS.md has the figures).
//!
//! The watch also starts reconciles, but only when what diagnosis would say
//! about a pod changes ([`ProblemMemory`]): a pod that becomes unschedulable,
//! starts crash-looping or recovers. Healthy pods coming and going change
//! nothing here; the Deployment's status already reports them.

use crate::api::lws::labels::{GROUP_INDEX, WORKER_INDEX};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use serde::{Deserialize, Deserializer};

use crate::core::diagnosis::{GpuRequest, diagnose};
use crate::core::labels::INSTANCE_LABEL;
use crate::core::tracks::TRACK_LABEL;

/// A pod as the cache keeps it: its metadata (names, the two labels that
/// say whose it is, deletion) and what diagnosis reads of its status, in
/// about a fifth of the room of a `Pod` (2.5 kB before any field is set).
/// [`PodView::to_pod`] gives diagnosis the `Pod` it reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodView {
    /// Its `labels` are always `None`: see `labels`.
    metadata: ObjectMeta,
    /// The kept labels, beside the metadata: a map costs a 544-byte B-tree
    /// node even for one entry, more than the rest of a cached pod's
    /// metadata, and there is one per pod in the cluster.
    labels: Vec<(&'static str, Box<str>)>,
    /// The `PodScheduled` condition, when the pod has one.
    scheduled: Option<Box<PodCondition>>,
    containers: Vec<ContainerSeen>,
    init_containers: Vec<ContainerSeen>,
}

/// One container's status: its state and how its last run ended.
#[derive(Clone, Debug, Default, PartialEq)]
struct ContainerSeen {
    name: String,
    image: String,
    restart_count: i32,
    /// `ready` and `started`: a crash loop is told from a slow start by them.
    ready: bool,
    started: Option<bool>,
    state: Option<StateSeen>,
    /// `lastState.terminated`: (reason, exit code).
    last_terminated: Option<Box<(Option<String>, i32)>>,
}

/// `state`: a real kubelet shows a crash loop as `terminated` and running
/// again as often as `CrashLoopBackOff`, so all three are kept.
#[derive(Clone, Debug, PartialEq)]
enum StateSeen {
    /// (reason, message)
    Waiting(Box<(Option<String>, Option<String>)>),
    Running,
    /// (reason, exit code)
    Terminated(Box<(Option<String>, i32)>),
}

fn terminated((reason, exit_code): &(Option<String>, i32)) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: reason.clone(),
            exit_code: *exit_code,
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

impl ContainerSeen {
    fn to_status(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            image: self.image.clone(),
            restart_count: self.restart_count,
            ready: self.ready,
            started: self.started,
            state: self.state.as_ref().map(|s| match s {
                StateSeen::Waiting(w) => ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: w.0.clone(),
                        message: w.1.clone(),
                    }),
                    ..ContainerState::default()
                },
                StateSeen::Running => ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..ContainerState::default()
                },
                StateSeen::Terminated(t) => terminated(t),
            }),
            last_state: self.last_terminated.as_deref().map(terminated),
            ..ContainerStatus::default()
        }
    }
}

impl Resource for PodView {
    type DynamicType = ();
    type Scope = <Pod as Resource>::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The labels a cached pod keeps: whose pod it is, of which track, and a
/// group member's place in its group.
const KEPT_LABELS: [&str; 4] = [INSTANCE_LABEL, TRACK_LABEL, GROUP_INDEX, WORKER_INDEX];

/// The pod as it comes from the wire; every field not named here is skipped.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: MetaWire,
    #[serde(default)]
    status: Option<StatusWire>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MetaWire {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    uid: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct StatusWire {
    #[serde(default)]
    conditions: Vec<PodCondition>,
    #[serde(default)]
    container_statuses: Vec<ContainerWire>,
    #[serde(default)]
    init_container_statuses: Vec<ContainerWire>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ContainerWire {
    #[serde(default)]
    name: String,
    #[serde(default)]
    image: String,
    #[serde(default)]
    restart_count: i32,
    #[serde(default)]
    ready: bool,
    started: Option<bool>,
    state: Option<ContainerState>,
    last_state: Option<ContainerState>,
}

impl ContainerWire {
    fn seen(self) -> ContainerSeen {
        ContainerSeen {
            name: self.name,
            image: self.image,
            restart_count: self.restart_count,
            ready: self.ready,
            started: self.started,
            state: self.state.and_then(|s| {
                if let Some(w) = s.waiting {
                    Some(StateSeen::Waiting(Box::new((w.reason, w.message))))
                } else if let Some(t) = s.terminated {
                    Some(StateSeen::Terminated(Box::new((t.reason, t.exit_code))))
                } else {
                    s.running.map(|_| StateSeen::Running)
                }
            }),
            last_terminated: self
                .last_state
                .and_then(|s| s.terminated)
                .map(|t| Box::new((t.reason, t.exit_code))),
        }
    }
}

impl<'de> Deserialize<'de> for PodView {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::deserialize(d)?;
        let labels = w
            .metadata
            .labels
            .into_iter()
            .filter_map(|(k, v)| {
                let kept = KEPT_LABELS.into_iter().find(|kept| *kept == k)?;
                Some((kept, v.into_boxed_str()))
            })
            .collect();
        let metadata = ObjectMeta {
            name: w.metadata.name,
            namespace: w.metadata.namespace,
            resource_version: w.metadata.resource_version,
            uid: w.metadata.uid,
            creation_timestamp: w.metadata.creation_timestamp,
            deletion_timestamp: w.metadata.deletion_timestamp,
            ..ObjectMeta::default()
        };
        let status = w.status.unwrap_or_default();
        let seen = |v: Vec<ContainerWire>| v.into_iter().map(ContainerWire::seen).collect();
        Ok(PodView {
            metadata,
            labels,
            scheduled: status
                .conditions
                .into_iter()
                .find(|c| c.type_ == "PodScheduled")
                .map(Box::new),
            containers: seen(status.container_statuses),
            init_containers: seen(status.init_container_statuses),
        })
    }
}

impl PodView {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| &**v)
    }

    /// The pod as diagnosis reads it: only the kept fields are set.
    pub fn to_pod(&self) -> Pod {
        let list = |v: &[ContainerSeen]| {
            (!v.is_empty()).then(|| v.iter().map(ContainerSeen::to_status).collect())
        };
        let labels = self
            .labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.to_string()))
            .collect::<BTreeMap<_, _>>();
        Pod {
            metadata: ObjectMeta {
                labels: (!labels.is_empty()).then_some(labels),
                ..self.metadata.clone()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: self.scheduled.as_deref().map(|c| vec![c.clone()]),
                container_statuses: list(&self.containers),
                init_container_statuses: list(&self.init_containers),
                ..PodStatus::default()
            }),
        }
    }

    /// The ModelService whose pod this is.
    pub fn owner<K: Resource<DynamicType = ()>>(&self) -> Option<ObjectRef<K>> {
        let ns = self.metadata.namespace.as_deref()?;
        Some(ObjectRef::new(self.label(INSTANCE_LABEL)?).within(ns))
    }
}

/// Which pods of a ModelService to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Track<'a> {
    /// Those of one track (`serving.modelservice.dev/track`).
    Only(&'a str),
    /// All but those of one track.
    Except(&'a str),
}

/// The cached pods of ModelService `name` in `namespace`, of `track`: found
/// through the [`PodIndex`], so a reconcile reads its own pods only, however
/// many pods the namespace holds.
pub fn of(
    store: &Store<PodView>,
    index: &PodIndex,
    namespace: &str,
    name: &str,
    track: Track<'_>,
) -> Vec<Pod> {
    index
        .names(namespace, name)
        .into_iter()
        .filter_map(|pod| store.get(&ObjectRef::new(&pod).within(namespace)))
        .filter(|p| match track {
            Track::Only(t) => p.label(TRACK_LABEL) == Some(t),
            Track::Except(t) => p.label(TRACK_LABEL) != Some(t),
        })
        .map(|p| p.to_pod())
        .collect()
}

/// The names of each ModelService's cached pods, kept beside the cache from
/// the same watch events. The reflector's store can only be scanned whole;
/// scanning it per reconcile would make each reconcile cost as much as the
/// namespace has pods, and a cold start of N models cost N².
#[derive(Debug, Default)]
pub struct PodIndex(std::sync::Mutex<IndexState>);

#[derive(Debug, Default)]
struct IndexState {
    by_model: HashMap<(String, String), BTreeSet<String>>,
    /// A relist in progress builds here, and replaces the index when it is
    /// done, as the reflector does with its store.
    relist: Option<HashMap<(String, String), BTreeSet<String>>>,
}

impl PodIndex {
    /// Follows one watch event (after the store has).
    pub fn apply(&self, event: &watcher::Event<PodView>) {
        let Ok(mut st) = self.0.lock() else { return };
        let key = |p: &PodView| {
            Some((
                (
                    p.metadata.namespace.clone()?,
                    p.label(INSTANCE_LABEL)?.to_string(),
                ),
                p.metadata.name.clone()?,
            ))
        };
        match event {
            watcher::Event::Init => st.relist = Some(HashMap::new()),
            watcher::Event::InitApply(p) => {
                if let (Some((k, n)), Some(r)) = (key(p), st.relist.as_mut()) {
                    r.entry(k).or_default().insert(n);
                }
            }
            watcher::Event::InitDone => {
                if let Some(r) = st.relist.take() {
                    st.by_model = r;
                }
            }
            watcher::Event::Apply(p) => {
                if let Some((k, n)) = key(p) {
                    st.by_model.entry(k).or_default().insert(n);
                }
            }
            watcher::Event::Delete(p) => {
                if let Some((k, n)) = key(p)
                    && let Some(names) = st.by_model.get_mut(&k)
                {
                    names.remove(&n);
                    if names.is_empty() {
                        st.by_model.remove(&k);
                    }
                }
            }
        }
    }

    fn names(&self, namespace: &str, name: &str) -> Vec<String> {
        let Ok(st) = self.0.lock() else {
            return Vec::new();
        };
        st.by_model
            .get(&(namespace.to_string(), name.to_string()))
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The writing end of the pods' cache: the store and its index.
pub struct PodWriter {
    pub writer: reflector::store::Writer<PodView>,
    pub index: std::sync::Arc<PodIndex>,
}

impl PodWriter {
    /// Applies one watch event to the store, then the index (what a test
    /// does in place of the watch).
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<PodView>) {
        self.writer.apply_watcher_event(event);
        self.index.apply(event);
    }
}

/// What diagnosis would say about this one pod, as a hash; 0 when nothing.
/// The GPU request only words the message, so any will do here.
fn problem(pod: &Pod) -> u64 {
    let gpu = GpuRequest {
        gpus: 1,
        resource: "nvidia.com/gpu",
    };
    match diagnose(std::slice::from_ref(pod), gpu) {
        None => 0,
        Some(p) => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (p.reason, p.message).hash(&mut h);
            h.finish().max(1)
        }
    }
}

/// The pods that currently have a problem, and what it is: a watch event
/// starts a reconcile only when that changes. Pods without one take no
/// room here.
#[derive(Debug, Default)]
pub struct ProblemMemory {
    problems: HashMap<(String, String), u64>,
}

impl ProblemMemory {
    /// The pod whose problem changed with `event`, if one did.
    pub fn changed(&mut self, event: watcher::Event<PodView>) -> Option<PodView> {
        let key = |p: &PodView| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        };
        match event {
            // A relist: forget, and let every pod with a problem speak again.
            watcher::Event::Init => {
                self.problems.clear();
                None
            }
            watcher::Event::InitDone => None,
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                let now = problem(&p.to_pod());
                let before = if now == 0 {
                    self.problems.remove(&key(&p))
                } else {
                    self.problems.insert(key(&p), now)
                };
                (before.unwrap_or(0) != now).then_some(p)
            }
            watcher::Event::Delete(p) => self.problems.remove(&key(&p)).map(|_| p),
        }
    }

    /// How many pods have a problem now.
    pub fn len(&self) -> usize {
        self.problems.len()
    }

    /// True when no pod has a problem.
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire(name: &str, track: Option<&str>, status: serde_json::Value) -> serde_json::Value {
        let mut labels = json!({
            "app.kubernetes.io/instance": "m",
            "app.kubernetes.io/name": "modelservice",
            "pod-template-hash": "abc",
        });
        if let Some(t) = track {
            labels[TRACK_LABEL] = json!(t);
        }
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7", "uid": "u",
                "labels": labels,
                "annotations": {"big": "x".repeat(1000)},
                "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"containers": [{"name": "server", "image": "vllm", "args": ["--model", "m"],
                "env": [{"name": "A", "value": "b"}]}], "nodeName": "n"},
            "status": status,
        })
    }

    fn view(v: serde_json::Value) -> PodView {
        serde_json::from_value(v).unwrap_or_default()
    }

    fn unschedulable(name: &str) -> PodView {
        view(wire(
            name,
            None,
            json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}),
        ))
    }

    fn running(name: &str) -> PodView {
        view(wire(
            name,
            None,
            json!({"phase": "Running", "podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "server", "image": "vllm", "imageID": "sha",
                    "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}),
        ))
    }

    #[test]
    fn a_cached_pod_is_a_fraction_of_a_pod() {
        assert!(std::mem::size_of::<PodView>() * 4 < std::mem::size_of::<Pod>());
    }

    #[test]
    fn the_kept_labels_are_held_outside_the_metadata_and_given_back_to_diagnosis() {
        let cached = view(wire("c", Some("canary"), json!({})));
        assert_eq!(cached.metadata.labels, None);
        assert_eq!(cached.label(INSTANCE_LABEL), Some("m"));
        assert_eq!(cached.label(TRACK_LABEL), Some("canary"));
        assert_eq!(cached.label("pod-template-hash"), None);
        let pod = cached.to_pod();
        let labels = pod.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.into_iter().collect::<Vec<_>>(),
            [
                (INSTANCE_LABEL.to_string(), "m".to_string()),
                (TRACK_LABEL.to_string(), "canary".to_string())
            ]
        );
    }

    #[test]
    fn keeps_what_diagnosis_reads_and_nothing_else() {
        let pod = unschedulable("a").to_pod();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.keys().collect::<Vec<_>>(), [INSTANCE_LABEL]);
        assert!(pod.spec.is_none());
        assert!(pod.metadata.annotations.is_none());
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));
        let d = diagnose(
            &[pod],
            GpuRequest {
                gpus: 1,
                resource: "nvidia.com/gpu",
            },
        );
        assert_eq!(
            d.map(|d| d.reason),
            Some(crate::core::reasons::INSUFFICIENT_GPU)
        );
        let r = running("b");
        let conds = r.to_pod().status.and_then(|s| s.conditions);
        assert_eq!(conds.map(|c| c.len()), Some(1), "only PodScheduled is kept");
    }

    #[test]
    fn a_crash_loop_is_diagnosed_from_the_kept_fields() {
        let p = view(wire(
            "c",
            Some("canary"),
            json!({"containerStatuses": [{"name": "server", "image": "x:crashloop", "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}),
        ));
        let d = diagnose(
            &[p.to_pod()],
            GpuRequest {
                gpus: 0,
                resource: "nvidia.com/gpu",
            },
        );
        assert_eq!(
            d.map(|d| d.message),
            Some("container server is crash-looping after 3 restarts; last exit: Error (code 1); see `kubectl logs --previous`".into())
        );
        assert_eq!(p.label(TRACK_LABEL), Some("canary"));
    }

    /// What the real kubelet shows for most of a crash loop: the second
    /// exit, `terminated`, before CrashLoopBackOff is written. The cache kept
    /// only `waiting` before, and diagnosis saw no problem here.
    #[test]
    fn a_crash_loop_between_back_offs_is_diagnosed_from_the_kept_fields() {
        let exit = json!({"terminated": {"exitCode": 3, "reason": "Error",
            "startedAt": "2026-12-05T10:56:44Z", "finishedAt": "2026-12-05T10:56:45Z"}});
        let p = view(wire(
            "c",
            None,
            json!({"containerStatuses": [{"name": "server", "image": "x", "ready": false,
                "started": false, "restartCount": 1, "state": exit, "lastState": exit}]}),
        ));
        let d = diagnose(
            &[p.to_pod()],
            GpuRequest {
                gpus: 0,
                resource: "nvidia.com/gpu",
            },
        );
        assert_eq!(
            d.map(|d| d.reason),
            Some(crate::core::reasons::CRASH_LOOPING)
        );
        let started = view(wire(
            "s",
            None,
            json!({"containerStatuses": [{"name": "server", "image": "x", "ready": true,
                "started": true, "restartCount": 2, "state": {"running": {}}, "lastState": exit}]}),
        ));
        let d = diagnose(
            &[started.to_pod()],
            GpuRequest {
                gpus: 0,
                resource: "nvidia.com/gpu",
            },
        );
        assert_eq!(d, None, "a restarted container that started serves");
    }

    #[test]
    fn pods_are_read_per_model_and_track() {
        let (store, writer) = kube::runtime::reflector::store::<PodView>();
        let index = std::sync::Arc::new(PodIndex::default());
        let mut writer = PodWriter {
            writer,
            index: index.clone(),
        };
        let mut other = running("o");
        other.labels = vec![(INSTANCE_LABEL, "n".into())];
        for p in [
            running("a"),
            view(wire("c", Some("canary"), json!({}))),
            other,
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        let names = |v: Vec<Pod>| {
            let mut n: Vec<String> = v.into_iter().filter_map(|p| p.metadata.name).collect();
            n.sort();
            n
        };
        let read = |ns: &str, track| names(of(&store, &index, ns, "m", track));
        assert_eq!(read("ns", Track::Except("canary")), ["a"]);
        assert_eq!(read("ns", Track::Only("canary")), ["c"]);
        assert!(read("other", Track::Except("canary")).is_empty());
        // A deleted pod leaves the index; a relist replaces it whole.
        writer.apply_watcher_event(&watcher::Event::Delete(running("a")));
        assert!(read("ns", Track::Except("canary")).is_empty());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(running("b")));
        assert_eq!(
            read("ns", Track::Only("canary")),
            ["c"],
            "the old index serves until the relist is done"
        );
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(read("ns", Track::Except("canary")), ["b"]);
        assert!(read("ns", Track::Only("canary")).is_empty());
        assert_eq!(
            running("a").owner::<Pod>(),
            Some(ObjectRef::new("m").within("ns"))
        );
    }

    #[test]
    fn only_a_change_in_what_diagnosis_says_starts_a_reconcile() {
        let mut m = ProblemMemory::default();
        let apply = |m: &mut ProblemMemory, p: PodView| m.changed(watcher::Event::Apply(p));
        // A healthy pod coming and going: nothing to say.
        assert!(apply(&mut m, running("a")).is_none());
        assert!(m.changed(watcher::Event::Delete(running("a"))).is_none());
        // Becoming unschedulable is news once, however often it is repeated.
        assert!(apply(&mut m, unschedulable("b")).is_some());
        assert!(apply(&mut m, unschedulable("b")).is_none());
        assert_eq!(m.len(), 1);
        // Recovering is news too, and leaves nothing behind.
        assert!(apply(&mut m, running("b")).is_some());
        assert!(m.is_empty());
        // A pod deleted while it had a problem.
        assert!(apply(&mut m, unschedulable("c")).is_some());
        assert!(
            m.changed(watcher::Event::Delete(unschedulable("c")))
                .is_some()
        );
        assert!(m.is_empty());
        // After a relist, a pod with a problem speaks again.
        assert!(apply(&mut m, unschedulable("d")).is_some());
        assert!(m.changed(watcher::Event::Init).is_none());
        assert!(
            m.changed(watcher::Event::InitApply(unschedulable("d")))
                .is_some()
        );
    }
}
