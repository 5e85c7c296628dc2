//! The LeaderWorkerSet controller's part, for the suite: neither back end
//! runs one (`../shared/k8s/crds/` has LWS v0.10.0's CRD, not its
//! controller), so this does what it would, through the API, in one place.
//!
//! What it does is LWS v0.10.0's behaviour, as far as the operator reads
//! it:
//! - for each group `g` below `spec.replicas`, the leader pod `<lws>-<g>`
//!   from `leaderTemplate`, and once it exists (`startupPolicy:
//!   LeaderCreated`) the workers `<lws>-<g>-<w>` from `workerTemplate`;
//! - every pod labelled `leaderworkerset.sigs.k8s.io/name`, `group-index`,
//!   `worker-index` and a template revision, and every container given
//!   `LWS_LEADER_ADDRESS`, `LWS_GROUP_SIZE` and `LWS_WORKER_INDEX`;
//! - a rolling update one group at a time, highest index first, while the
//!   other groups are ready; with `maxSurge`, that many groups of the new
//!   template beyond `replicas` first, released once none is outdated;
//! - `RecreateGroupOnPodRestart`: a member whose container restarted takes
//!   its whole group down, to be made again;
//! - status in groups: `replicas`, `readyReplicas` (every member ready),
//!   `updatedReplicas`, `observedGeneration`, `hpaPodSelector`, and the
//!   `Available` and `Progressing` conditions.
//!
//! The objects it reads are parsed with the operator's `api::lws` types and
//! its labels come from `api::lws::labels`, so a field or label the
//! operator gets wrong breaks here too; and on the real API server, the
//! upstream CRD's schema checks the status it writes.

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use k8s_openapi::api::core::v1::{EnvVar, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use modelservice_operator::api::lws::labels::{
    GROUP_INDEX, GROUP_SIZE_ENV, LEADER_ADDRESS_ENV, NAME, WORKER_INDEX, WORKER_INDEX_ENV,
};
use modelservice_operator::api::lws::{GROUP, KIND, LeaderWorkerSet, VERSION};
use serde_json::{Value, json};

use crate::harness::Env;

/// The label of the template revision a pod was made from.
const REVISION: &str = "leaderworkerset.sigs.k8s.io/template-revision-hash";

/// LeaderWorkerSets in `namespace`.
pub fn lws_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, KIND);
    let ar = ApiResource::from_gvk_with_plural(&gvk, "leaderworkersets");
    Api::namespaced_with(client.clone(), namespace, &ar)
}

/// The stand-in, running until dropped.
pub struct LwsController {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LwsController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LwsController {
    /// Starts acting on the LeaderWorkerSets of `env`'s namespace, every 200 ms.
    pub fn start(env: &Env) -> Self {
        let client = env.client.clone();
        let ns = env.namespace.clone();
        let task = tokio::spawn(async move {
            loop {
                // Errors (the CRD not installed yet) are retried next tick,
                // as a controller would.
                let _ = step(&client, &ns).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self { task }
    }
}

fn revision(lws: &LeaderWorkerSet) -> String {
    let t = serde_json::to_string(&lws.spec.leader_worker_template).unwrap_or_default();
    let mut h = DefaultHasher::new();
    t.hash(&mut h);
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.ready))
}

fn restarted(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.restart_count > 0))
}

fn index(p: &Pod, key: &str) -> Option<i32> {
    p.labels().get(key)?.parse().ok()
}

async fn step(client: &Client, ns: &str) -> Result<(), kube::Error> {
    let api = lws_api(client, ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for obj in api.list(&ListParams::default()).await?.items {
        if obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Ok(lws) = serde_json::from_value::<LeaderWorkerSet>(
            serde_json::to_value(&obj).unwrap_or_default(),
        ) else {
            continue;
        };
        one(client, ns, &pods, &obj, &lws).await?;
    }
    Ok(())
}

/// One LeaderWorkerSet: its groups, then its status.
async fn one(
    client: &Client,
    ns: &str,
    pods: &Api<Pod>,
    obj: &DynamicObject,
    lws: &LeaderWorkerSet,
) -> Result<(), kube::Error> {
    let name = obj.name_any();
    let replicas = lws.spec.replicas.unwrap_or(1).max(0);
    let size = lws.spec.leader_worker_template.size.max(1);
    let rev = revision(lws);
    let mine = pods
        .list(&ListParams::default().labels(&format!("{NAME}={name}")))
        .await?
        .items;
    let mut groups: BTreeMap<i32, Vec<Pod>> = BTreeMap::new();
    for p in mine
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Some(g) = index(&p, GROUP_INDEX) {
            groups.entry(g).or_default().push(p);
        }
    }
    let whole = |ps: &[Pod]| ps.len() == size as usize;
    let group_ready = |ps: &[Pod]| whole(ps) && ps.iter().all(ready);
    let current = |ps: &[Pod]| ps.iter().all(|p| p.labels().get(REVISION) == Some(&rev));
    // A rolling update with maxSurge adds that many groups of the new
    // template beyond the count while groups are outdated, and releases
    // them once every group of the count is updated and ready.
    let outdated: Vec<i32> = groups
        .iter()
        .filter(|(g, ps)| **g < replicas && !current(ps))
        .map(|(g, _)| *g)
        .collect();
    // The burst stays until every group of the count runs the new
    // template and is ready.
    let bursting = groups.keys().any(|g| *g >= replicas)
        && (0..replicas).any(|g| !groups.get(&g).is_some_and(|ps| group_ready(ps)));
    let surge = match &lws
        .spec
        .rollout_strategy
        .rolling_update_configuration
        .max_surge
    {
        IntOrString::Int(n) if !outdated.is_empty() || bursting => (*n).max(0),
        _ => 0,
    };
    let total = replicas + surge;
    // Groups beyond the count go; a group with a restarted member goes
    // as a whole (RecreateGroupOnPodRestart).
    let mut gone: Vec<i32> = groups
        .iter()
        .filter(|(g, ps)| **g >= total || ps.iter().any(restarted))
        .map(|(g, _)| *g)
        .collect();
    // One outdated group at a time, the highest first, while every other
    // group (a surge's included) is ready.
    let target = outdated.last().copied();
    let others_ready = (0..total)
        .filter(|g| Some(*g) != target)
        .all(|g| groups.get(&g).is_some_and(|ps| group_ready(ps)));
    if let Some(g) = target.filter(|_| others_ready) {
        gone.push(g);
    }
    for g in &gone {
        for p in groups.remove(g).unwrap_or_default() {
            let _ = pods
                .delete(&p.name_any(), &DeleteParams::background())
                .await;
        }
    }
    for g in 0..total {
        if gone.contains(&g) {
            continue;
        }
        let members = groups.entry(g).or_default();
        for w in 0..size {
            let pod_name = if w == 0 {
                format!("{name}-{g}")
            } else {
                format!("{name}-{g}-{w}")
            };
            let leader_there = members.iter().any(|p| index(p, WORKER_INDEX) == Some(0));
            if members.iter().any(|p| p.name_any() == pod_name) || (w > 0 && !leader_there) {
                continue;
            }
            let pod = member(obj, lws, ns, &name, &rev, g, w, size)?;
            if let Ok(p) = pods.create(&PostParams::default(), &pod).await {
                members.push(p);
            }
        }
    }
    let existing = groups.values().filter(|ps| !ps.is_empty()).count() as i32;
    let ready_groups = groups.values().filter(|ps| group_ready(ps)).count() as i32;
    let updated = groups
        .iter()
        .filter(|(g, ps)| **g < replicas && whole(ps) && current(ps))
        .count() as i32;
    write_status(client, ns, obj, existing, ready_groups, updated, replicas).await
}

/// Pod `w` of group `g`, as LWS makes it from its template.
#[allow(clippy::too_many_arguments)]
fn member(
    obj: &DynamicObject,
    lws: &LeaderWorkerSet,
    ns: &str,
    name: &str,
    rev: &str,
    g: i32,
    w: i32,
    size: i32,
) -> Result<Pod, kube::Error> {
    let t = &lws.spec.leader_worker_template;
    let template = if w == 0 {
        &t.leader_template
    } else {
        &t.worker_template
    };
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    for (k, v) in [
        (NAME, name.to_string()),
        (GROUP_INDEX, g.to_string()),
        (WORKER_INDEX, w.to_string()),
        (REVISION, rev.to_string()),
    ] {
        labels.insert(k.to_string(), v);
    }
    let mut spec = template.spec.clone().unwrap_or_default();
    for c in &mut spec.containers {
        let mut env = vec![
            EnvVar {
                name: LEADER_ADDRESS_ENV.into(),
                value: Some(format!("{name}-{g}.{name}.{ns}")),
                value_from: None,
            },
            EnvVar {
                name: GROUP_SIZE_ENV.into(),
                value: Some(size.to_string()),
                value_from: None,
            },
            EnvVar {
                name: WORKER_INDEX_ENV.into(),
                value: Some(w.to_string()),
                value_from: None,
            },
        ];
        env.extend(c.env.take().unwrap_or_default());
        c.env = Some(env);
    }
    let pod_name = if w == 0 {
        format!("{name}-{g}")
    } else {
        format!("{name}-{g}-{w}")
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
            "annotations": {"leaderworkerset.sigs.k8s.io/size": size.to_string()},
            "ownerReferences": [{"apiVersion": format!("{GROUP}/{VERSION}"), "kind": KIND,
                "name": name, "uid": obj.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec,
    }))
    .map_err(kube::Error::SerdeError)
}

/// The LWS's status, in groups, written only when it changed.
async fn write_status(
    client: &Client,
    ns: &str,
    obj: &DynamicObject,
    existing: i32,
    ready: i32,
    updated: i32,
    replicas: i32,
) -> Result<(), kube::Error> {
    let name = obj.name_any();
    let available = ready >= replicas;
    let condition = |type_: &str, status: bool, reason: &str| {
        json!({"type": type_, "status": if status { "True" } else { "False" }, "reason": reason,
            "message": format!("{type_}, as the suite's LWS stand-in says"),
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let status = json!({
        "observedGeneration": obj.metadata.generation,
        "replicas": existing, "readyReplicas": ready, "updatedReplicas": updated,
        "hpaPodSelector": format!("{NAME}={name},{WORKER_INDEX}=0"),
        "conditions": [
            condition("Available", available, if available { "AllGroupsReady" } else { "GroupsNotReady" }),
            condition("Progressing", !available, if available { "Ready" } else { "GroupsProgressing" }),
        ],
    });
    let current = obj.data.get("status").cloned().unwrap_or(Value::Null);
    if !modelservice_operator::core::subset::is_subset(&status, &current) {
        lws_api(client, ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await?;
    }
    Ok(())
}
