//! A stand-in for kube-controller-manager, kube-scheduler and kubelet.
//!
//! The fake API server only stores objects; on a real cluster other
//! components turn a Deployment into pods and report status. This simulator
//! does that, through the ordinary API (a `kube::Client`), so the operator sees
//! the same kind of writes it would see from a real cluster:
//! - one pod per desired replica, labelled from the pod template, with a
//!   `pod-template-hash`; pods of an old template are replaced;
//! - scheduling against nodes with a fixed number of GPUs each: a pod that fits
//!   nowhere stays Pending with the scheduler's real wording
//!   (`0/N nodes are available: N Insufficient nvidia.com/gpu.`);
//! - image pulls: an image whose reference contains `.invalid/` or ends in
//!   `:does-not-exist` fails with ErrImagePull, then ImagePullBackOff;
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
use k8s_openapi::api::core::v1::Pod;
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

fn gpu_request(d: &Deployment, resource: &str) -> i64 {
    d.spec
        .template
        .spec
        .iter()
        .flat_map(|p| p.containers.iter())
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(resource))
        .filter_map(|q| q.0.parse::<i64>().ok())
        .sum()
}

fn image(d: &Deployment) -> String {
    d.spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn image_fails(image: &str) -> bool {
    image.contains(".invalid/") || image.ends_with(":does-not-exist")
}

/// One pass over every Deployment.
async fn step(client: &Client, shape: &ClusterShape) -> Result<(), kube::Error> {
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

        // Replace pods of an old template; remove surplus pods.
        let mut current: Vec<&Pod> = Vec::new();
        for p in owned {
            let ph = p
                .labels()
                .get("pod-template-hash")
                .cloned()
                .unwrap_or_default();
            if ph != hash || current.len() >= want {
                let _ = pods.delete(&p.name_any(), &DeleteParams::default()).await;
                if let Some(i) = placed.remove(&format!("{ns}/{}", p.name_any())) {
                    free[i] += pod_gpus(p, &shape.gpu_resource);
                }
            } else {
                current.push(p);
            }
        }
        // Create missing pods.
        let gpus = gpu_request(&d, &shape.gpu_resource);
        let mut created: Vec<Pod> = Vec::new();
        for i in 0..want.saturating_sub(current.len()) {
            let pod_name = format!("{name}-{hash}-{}", current.len() + i);
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
                "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                        "uid": d.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
                "spec": d.spec.template.spec,
            }))
            .map_err(kube::Error::SerdeError)?;
            if let Ok(p) = pods.create(&PostParams::default(), &pod).await {
                created.push(p);
            }
        }
        // Schedule and run every current pod, then report.
        let mut ready = 0;
        let mut total = 0;
        let names: Vec<String> = current
            .iter()
            .map(|p| p.name_any())
            .chain(created.iter().map(|p| p.name_any()))
            .collect();
        for pod_name in names {
            total += 1;
            let key = format!("{ns}/{pod_name}");
            let node = match placed.get(&key) {
                Some(i) => Some(*i),
                None => {
                    let fit = free.iter().position(|f| *f >= gpus);
                    if let Some(i) = fit {
                        free[i] -= gpus;
                        placed.insert(key.clone(), i);
                    }
                    fit
                }
            };
            let existing = pods.get_opt(&pod_name).await?;
            let Some(existing) = existing else { continue };
            let status = pod_status(node, gpus, shape, &image(&d), existing.status.as_ref());
            if node.is_some()
                && existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .is_none()
                && let Some(i) = node
            {
                let bind = json!({"spec": {"nodeName": format!("node-{i}")}});
                pods.patch(&pod_name, &PatchParams::default(), &Patch::Merge(&bind))
                    .await?;
            }
            if status
                .get("containerStatuses")
                .and_then(|c| c[0]["ready"].as_bool())
                == Some(true)
            {
                ready += 1;
            }
            let current_status = serde_json::to_value(&existing.status).unwrap_or(Value::Null);
            if !same_status(&current_status, &status) {
                pods.patch_status(
                    &pod_name,
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Merge(&json!({"status": status})),
                )
                .await?;
            }
        }
        let generation = d.metadata.generation.unwrap_or(1);
        let complete = ready == want && total == want;
        let (p_status, p_reason) = if complete {
            ("True", "NewReplicaSetAvailable")
        } else {
            ("True", "ReplicaSetUpdated")
        };
        let status = json!({
            "observedGeneration": generation,
            "replicas": total, "updatedReplicas": total, "readyReplicas": ready, "availableReplicas": ready,
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
    Ok(())
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
        return json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}]});
    };
    if image_fails(image) {
        // First ErrImagePull, then ImagePullBackOff, as the kubelet reports it.
        let was_pulling = previous
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
        let reason = if was_pulling.is_some() {
            "ImagePullBackOff"
        } else {
            "ErrImagePull"
        };
        return json!({"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "server", "image": image, "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason,
                    "message": format!("Back-off pulling image \"{image}\": not found")}}}]});
    }
    if image.contains("crashloop") {
        return json!({"phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "server", "image": image, "imageID": "", "ready": false, "restartCount": 3, "started": false,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": "back-off 40s restarting failed container=server"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]});
    }
    json!({"phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "server", "image": image, "imageID": "", "ready": true, "restartCount": 0, "started": true,
            "state": {"running": {}}}]})
}
