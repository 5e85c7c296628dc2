//! A stand-in for kube-controller-manager, kube-scheduler and kubelet.
//!
//! The fake API server only stores objects; on a real cluster other
//! components turn a Deployment into pods and report status. This simulator
//! does that, through the ordinary API (a `kube::Client`), so the operator sees
//! the same kind of writes it would see from a real cluster:
//! - one pod per desired replica, labelled from the pod template, with a
//!   `pod-template-hash`; pods of an old template are replaced;
//! - Node objects `node-0` .. `node-{N-1}`, Ready, with `gpu_resource`
//!   allocatable and the labels `../shared/k8s`'s podsim gives its nodes
//!   (`kubernetes.io/hostname`, `nvidia.com/gpu.present`), kept in step with
//!   [`Simulator::set_nodes`] and [`Simulator::set_gpus_per_node`];
//! - scheduling against those nodes: a pod goes to the first node that matches
//!   its nodeSelector and has its GPUs free; a pod that fits nowhere stays
//!   Pending with the scheduler's real wording
//!   (`0/N nodes are available: N Insufficient nvidia.com/gpu.`) and, as the
//!   scheduler does, the time of its first failure as the condition's
//!   `lastTransitionTime`;
//! - rollouts as the Deployment controller does them, none while the
//!   Deployment is paused: RollingUpdate creates
//!   new pods within maxSurge and deletes old ones only while maxUnavailable
//!   allows (so maxSurge 0 with one replica shows 0 ready pods for a moment,
//!   and maxSurge 1 never does); Recreate deletes every old pod first;
//! - pods no Deployment owns (a LeaderWorkerSet's, which the e2e suite
//!   makes as the LWS controller would) are scheduled and run the same way;
//! - image pulls: an image whose reference contains `.invalid/` or ends in
//!   `:does-not-exist` fails with ErrImagePull, then ImagePullBackOff, on
//!   the real node's timeline and in its words (see `kubelet`);
//! - the fake model server's knobs (a slow load, a crash with an exit code),
//!   on the real node's timeline (see `kubelet`);
//! - crashes: an image whose name contains `crashloop` runs, exits 1 and is
//!   in CrashLoopBackOff, as `../shared/k8s`'s podsim makes it;
//! - Deployment status (observedGeneration, replica counts, Available and
//!   Progressing conditions) as the Deployment controller reports it.
//!
//! It writes only what changed, so a settled cluster makes no writes.

use std::collections::{BTreeMap, hash_map::DefaultHasher};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// The simulated cluster's shape.
#[derive(Clone, Debug)]
pub struct ClusterShape {
    pub nodes: usize,
    /// GPUs of `gpu_resource` on each node.
    pub gpus_per_node: i64,
    pub gpu_resource: String,
}

impl Default for ClusterShape {
    fn default() -> Self {
        Self {
            nodes: 3,
            gpus_per_node: 8,
            gpu_resource: "nvidia.com/gpu".into(),
        }
    }
}

/// A running simulator; stops when dropped.
pub struct Simulator {
    shape: Arc<Mutex<ClusterShape>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const FIELD_MANAGER: &str = "kube-controller-manager";

impl Simulator {
    /// Starts simulating, polling every 100 ms.
    pub fn start(client: Client, shape: ClusterShape) -> Self {
        let shape = Arc::new(Mutex::new(shape));
        let s = shape.clone();
        let task = tokio::spawn(async move {
            loop {
                let current = s.lock().map(|g| g.clone()).unwrap_or_default();
                // Errors (a paused or failing API server) are retried next tick,
                // as a real controller would.
                let _ = step(&client, &current).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { shape, task }
    }

    /// Changes the number of nodes (a node pool that autoscales): the
    /// scheduler's message for a pending pod names the new count.
    pub fn set_nodes(&self, nodes: usize) {
        if let Ok(mut g) = self.shape.lock() {
            g.nodes = nodes;
        }
    }

    /// Changes the GPUs per node (for example to end a GPU shortage).
    pub fn set_gpus_per_node(&self, gpus: i64) {
        if let Ok(mut g) = self.shape.lock() {
            g.gpus_per_node = gpus;
        }
    }
}

fn template_hash(d: &Deployment) -> String {
    let t = serde_json::to_string(&d.spec.template).unwrap_or_default();
    let mut h = DefaultHasher::new();
    t.hash(&mut h);
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}

fn image_fails(image: &str) -> bool {
    image.contains(".invalid/") || image.ends_with(":does-not-exist")
}

/// The label that marks the nodes the simulator registered.
const SIMULATED: &str = "fake-apiserver/simulated";

/// The name of node `i`.
fn node_name(i: usize) -> String {
    format!("node-{i}")
}

/// The labels of node `i`: those `../shared/k8s`'s podsim gives its nodes
/// that a scheduling constraint may name.
fn node_labels(i: usize, shape: &ClusterShape) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), node_name(i)),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("nvidia.com/gpu.present".to_string(), "true".to_string()),
        (
            "nvidia.com/gpu.count".to_string(),
            shape.gpus_per_node.to_string(),
        ),
        (SIMULATED.to_string(), "true".to_string()),
    ])
}

/// Node `i` as its kubelet keeps it: Ready, with the shape's GPUs.
fn node_status(shape: &ClusterShape) -> Value {
    let capacity = json!({"cpu": "32", "memory": "128Gi", "pods": "110",
        shape.gpu_resource.as_str(): shape.gpus_per_node.to_string()});
    json!({"capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status (simulated)"}]})
}

/// Makes the Node objects match the shape: registers missing nodes,
/// updates labels and GPUs that changed, removes nodes beyond the count.
async fn sync_nodes(client: &Client, shape: &ClusterShape) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let existing = api
        .list(&ListParams::default().labels(&format!("{SIMULATED}=true")))
        .await?
        .items;
    for n in &existing {
        let index = n
            .name_any()
            .strip_prefix("node-")
            .and_then(|i| i.parse::<usize>().ok());
        if index.is_none_or(|i| i >= shape.nodes) {
            let _ = api.delete(&n.name_any(), &DeleteParams::default()).await;
        }
    }
    for i in 0..shape.nodes {
        let name = node_name(i);
        let labels = node_labels(i, shape);
        let status = node_status(shape);
        let current = existing.iter().find(|n| n.name_any() == name);
        let Some(current) = current else {
            let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels}, "spec": {}}))
            .map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &node).await?;
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await?;
            continue;
        };
        if current.metadata.labels.as_ref() != Some(&labels) {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": labels}})),
            )
            .await?;
        }
        let current_status = serde_json::to_value(&current.status).unwrap_or(Value::Null);
        if !same_status(&current_status, &status) {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await?;
        }
    }
    Ok(())
}

/// Whether a pod's nodeSelector admits node `i`.
fn selects(pod: &Pod, i: usize, shape: &ClusterShape) -> bool {
    let labels = node_labels(i, shape);
    pod.spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// maxSurge and maxUnavailable as pod counts for `want` replicas, as the
/// Deployment controller resolves them (percentages: surge rounds up,
/// unavailable down; both 0 would never progress, so 1 unavailable).
/// Recreate is `None`.
fn rolling(d: &Deployment, want: usize) -> Option<(usize, usize)> {
    let strategy = d.spec.strategy.as_ref();
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return None;
    }
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    let resolve = |v: Option<&IntOrString>, round_up: bool| -> usize {
        match v {
            Some(IntOrString::Int(n)) => (*n).max(0) as usize,
            Some(IntOrString::String(p)) => {
                let pct = p.trim_end_matches('%').parse::<usize>().unwrap_or(25);
                let scaled = want * pct;
                if round_up {
                    scaled.div_ceil(100)
                } else {
                    scaled / 100
                }
            }
            None => {
                if round_up {
                    (want * 25).div_ceil(100)
                } else {
                    want * 25 / 100
                }
            }
        }
    };
    let surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), true);
    let unavailable = resolve(ru.and_then(|r| r.max_unavailable.as_ref()), false);
    Some(if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    })
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .is_some_and(|c| c.ready)
}

fn pod_image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// One pass over every Deployment.
async fn step(client: &Client, shape: &ClusterShape) -> Result<(), kube::Error> {
    sync_nodes(client, shape).await?;
    let deployments: Api<Deployment> = Api::all(client.clone());
    let deps = deployments.list(&ListParams::default()).await?.items;
    let pods_api: Api<Pod> = Api::all(client.clone());
    let all_pods = pods_api.list(&ListParams::default()).await?.items;

    // Free GPUs per node, after the pods already placed.
    let mut free: Vec<i64> = vec![shape.gpus_per_node; shape.nodes];
    let mut placed: BTreeMap<String, usize> = BTreeMap::new();
    for p in &all_pods {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_ref())
            && let Some(i) = node
                .strip_prefix("node-")
                .and_then(|n| n.parse::<usize>().ok())
            && i < free.len()
        {
            let want = pod_gpus(p, &shape.gpu_resource);
            free[i] -= want;
            placed.insert(
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                i,
            );
        }
    }

    let by_deployment: Vec<String> = deps.iter().filter_map(|d| d.metadata.uid.clone()).collect();
    for d in deps {
        if d.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = d.namespace().unwrap_or_default();
        let name = d.name_any();
        let hash = template_hash(&d);
        let want = d.spec.replicas.unwrap_or(1).max(0) as usize;
        let owned: Vec<&Pod> = all_pods
            .iter()
            .filter(|p| {
                p.namespace().as_deref() == Some(ns.as_str())
                    && p.owner_references()
                        .iter()
                        .any(|o| Some(&o.uid) == d.metadata.uid.as_ref())
            })
            .collect();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let (mut current, mut old): (Vec<&Pod>, Vec<&Pod>) = owned
            .into_iter()
            .partition(|p| p.labels().get("pod-template-hash") == Some(&hash));
        let mut delete = |p: &Pod, free: &mut Vec<i64>| {
            let pod_name = p.name_any();
            if let Some(i) = placed.remove(&format!("{ns}/{pod_name}")) {
                free[i] += pod_gpus(p, &shape.gpu_resource);
            }
            pod_name
        };
        let mut deleted: Vec<String> = Vec::new();
        // Surplus pods of the current template go first.
        while current.len() > want {
            if let Some(p) = current.pop() {
                deleted.push(delete(p, &mut free));
            }
        }
        // How many new pods to create, and how many old ones to remove.
        // A paused Deployment (`kubectl rollout pause`) rolls nothing out.
        let paused = d.spec.paused == Some(true) && !old.is_empty();
        let (create, remove) = match rolling(&d, want) {
            _ if paused => (0, 0),
            None => (
                if old.is_empty() {
                    want - current.len()
                } else {
                    0
                },
                old.len(),
            ),
            Some((max_surge, max_unavailable)) => {
                let room = (want + max_surge).saturating_sub(old.len() + current.len());
                let create = room.min(want - current.len());
                // The controller's rule: all pods - minAvailable - new pods not yet available.
                let all = old.len() + current.len() + create;
                let new_unavailable = current.iter().filter(|p| !is_ready(p)).count() + create;
                let min_available = want.saturating_sub(max_unavailable);
                // Old pods that are not ready cost no availability: they go first.
                old.sort_by_key(|p| is_ready(p));
                let unready_old = old.iter().filter(|p| !is_ready(p)).count();
                let budget = all.saturating_sub(min_available + new_unavailable);
                (create, unready_old.max(budget).min(old.len()))
            }
        };
        let kept_old: Vec<&Pod> = old.split_off(remove);
        for p in old {
            deleted.push(delete(p, &mut free));
        }
        for pod_name in &deleted {
            let _ = pods.delete(pod_name, &DeleteParams::default()).await;
        }
        let current_count = current.len();
        let mut created: Vec<Pod> = Vec::new();
        for _ in 0..create {
            // Named as the ReplicaSet controller names them: the API server
            // cuts the prefix to 58 characters and adds 5 random ones.
            let generate_name = format!("{name}-{hash}-");
            let mut labels = d
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default();
            labels.insert("pod-template-hash".into(), hash.clone());
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": generate_name, "namespace": ns, "labels": labels,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                        "uid": d.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
                "spec": d.spec.template.spec,
            }))
            .map_err(kube::Error::SerdeError)?;
            if let Ok(p) = pods.create(&PostParams::default(), &pod).await {
                created.push(p);
            }
        }
        // Schedule and run every remaining pod, then report.
        let mut ready: usize = 0;
        let mut total: usize = 0;
        let running: Vec<&Pod> = kept_old
            .iter()
            .copied()
            .chain(current.iter().copied())
            .chain(created.iter())
            .collect();
        for p in running {
            total += 1;
            if run_pod(&pods, p, &mut free, &mut placed, shape).await? {
                ready += 1;
            }
        }
        let updated = current_count + created.len();
        let generation = d.metadata.generation.unwrap_or(1);
        let complete = kept_old.is_empty() && updated == want && ready == want;
        let (p_status, p_reason) = if complete {
            ("True", "NewReplicaSetAvailable")
        } else {
            ("True", "ReplicaSetUpdated")
        };
        let status = json!({
            "observedGeneration": generation,
            "replicas": total, "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": ready,
            "unavailableReplicas": total.saturating_sub(ready),
            "conditions": [
                {"type": "Available", "status": if ready > 0 || want == 0 { "True" } else { "False" },
                 "reason": if ready > 0 { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                 "message": "Deployment availability, as simulated."},
                {"type": "Progressing", "status": p_status, "reason": p_reason,
                 "message": format!("ReplicaSet \"{name}-{hash}\" is progressing.")}
            ]
        });
        let current_status = serde_json::to_value(&d.status).unwrap_or(Value::Null);
        if !same_status(&current_status, &status) {
            deployments_ns(client, &ns)
                .patch_status(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Merge(&json!({"status": status})),
                )
                .await?;
        }
    }
    // Pods no Deployment owns (a LeaderWorkerSet's, made by the suite's
    // stand-in for its controller): scheduled and run like the others, as
    // the scheduler and the kubelet run any pod.
    for p in &all_pods {
        let owned = p
            .owner_references()
            .iter()
            .any(|o| o.kind == "Deployment" && by_deployment.contains(&o.uid));
        if owned || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &p.namespace().unwrap_or_default());
        run_pod(&pods, p, &mut free, &mut placed, shape).await?;
    }
    Ok(())
}

/// Schedules `p` (where it is not placed yet) and reports its status as its
/// kubelet would. True when it is ready.
async fn run_pod(
    pods: &Api<Pod>,
    p: &Pod,
    free: &mut [i64],
    placed: &mut BTreeMap<String, usize>,
    shape: &ClusterShape,
) -> Result<bool, kube::Error> {
    let pod_name = p.name_any();
    let key = format!("{}/{pod_name}", p.namespace().unwrap_or_default());
    let gpus = pod_gpus(p, &shape.gpu_resource);
    let node = match placed.get(&key) {
        Some(i) => Some(*i),
        None => {
            let fit = (0..free.len()).find(|i| free[*i] >= gpus && selects(p, *i, shape));
            if let Some(i) = fit {
                free[i] -= gpus;
                placed.insert(key.clone(), i);
            }
            fit
        }
    };
    let existing = pods.get_opt(&pod_name).await?;
    let Some(existing) = existing else {
        return Ok(false);
    };
    let status = pod_status(
        &existing,
        node,
        gpus,
        shape,
        &pod_image(p),
        existing.status.as_ref(),
    );
    if existing
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .is_none()
        && let Some(i) = node
    {
        let bind = json!({"spec": {"nodeName": node_name(i)}});
        pods.patch(&pod_name, &PatchParams::default(), &Patch::Merge(&bind))
            .await?;
    }
    let ready = status
        .get("containerStatuses")
        .and_then(|c| c[0]["ready"].as_bool())
        == Some(true);
    let current_status = serde_json::to_value(&existing.status).unwrap_or(Value::Null);
    if !same_status(&current_status, &status) {
        pods.patch_status(
            &pod_name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    }
    Ok(ready)
}

fn deployments_ns(client: &Client, ns: &str) -> Api<Deployment> {
    Api::namespaced(client.clone(), ns)
}

fn pod_gpus(p: &Pod, resource: &str) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(resource))
        .filter_map(|q| q.0.parse::<i64>().ok())
        .sum()
}

/// Compares the fields the simulator sets, ignoring timestamps it never writes.
fn same_status(current: &Value, wanted: &Value) -> bool {
    match (current, wanted) {
        (Value::Object(c), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| c.get(k).is_some_and(|cv| same_status(cv, wv))),
        (Value::Array(c), Value::Array(w)) => {
            c.len() == w.len() && c.iter().zip(w).all(|(a, b)| same_status(a, b))
        }
        (c, w) => c == w,
    }
}

fn pod_status(
    pod: &Pod,
    node: Option<usize>,
    gpus: i64,
    shape: &ClusterShape,
    image: &str,
    previous: Option<&k8s_openapi::api::core::v1::PodStatus>,
) -> Value {
    let Some(_) = node else {
        let n = shape.nodes;
        let msg = if gpus > shape.gpus_per_node || gpus > 0 {
            format!(
                "0/{n} nodes are available: {n} Insufficient {}. preemption: 0/{n} nodes are available: {n} No preemption victims found for incoming pod.",
                shape.gpu_resource
            )
        } else {
            format!(
                "0/{n} nodes are available: {n} node(s) didn't match Pod's node affinity/selector."
            )
        };
        // The scheduler stamps when the pod first failed, and keeps it.
        let since = previous
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
            .unwrap_or_else(|| {
                let now = k8s_openapi::jiff::Timestamp::now();
                k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
            });
        return json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg,
             "lastTransitionTime": since.to_string()}]});
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let start = previous
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
        .unwrap_or_else(|| {
            k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
        });
    let t = now.duration_since(start).as_secs_f64();
    if let Some(s) = crate::kubelet::status(pod, image, image_fails(image), start, t) {
        return s;
    }
    if image.contains("crashloop") {
        return json!({"phase": "Running", "startTime": crate::kubelet::at(start, 0.0),
            "conditions": crate::kubelet::conditions(start, None),
            "containerStatuses": [{"name": "server", "image": image, "imageID": "", "ready": false, "restartCount": 3, "started": false,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off 40s restarting failed container=server pod={}_{}({})",
                        pod.name_any(), pod.namespace().unwrap_or_default(), pod.uid().unwrap_or_default())}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]});
    }
    json!({"phase": "Running",
        "startTime": crate::kubelet::at(start, 0.0),
        "conditions": crate::kubelet::conditions(start, Some(0.0)),
        "containerStatuses": [{"name": "server", "image": image, "imageID": "", "ready": true, "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": crate::kubelet::at(start, 0.0)}}}]})
}
