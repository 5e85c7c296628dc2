//! A LeaderWorkerSet as the report reads it: its groups stated as a
//! Deployment's rollout (see `core::groups`), from the LWS's status and
//! the cached pods of its ModelService.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Context;
use super::children::{Cached, Child, LeaderWorkerSetChild};
use super::lean::LeanDeployment;
use super::observe::{Track, cached, pods};
use crate::core::groups::{self, RECREATION_WINDOW_MINUTES};
use crate::core::tracks::{CANARY, canary_may_go};

/// `lws` as a Deployment would be: its generation, its replicas (groups),
/// its annotations (a canary's rollback and hold), its leaders' pod
/// template, and a status counted in groups whose every member is ready.
/// `None` when its names are missing or the result cannot be read back.
pub fn as_deployment(ctx: &Context, lws: &Cached<LeaderWorkerSetChild>) -> Option<LeanDeployment> {
    let meta = &lws.metadata;
    let (ns, name) = (meta.namespace.as_deref()?, meta.name.as_deref()?);
    let whole = lws.to_json().ok()?;
    let spec = &whole["spec"];
    // The API server's defaults, for a spec that leaves them out.
    let replicas = spec["replicas"].as_i64().map_or(1, |r| r as i32);
    let t = &spec["leaderWorkerTemplate"];
    let size = t["size"].as_i64().map_or(1, |s| s as i32);
    // Its pods are its ModelService's, of its track, as its template says.
    let labels = &t["leaderTemplate"]["metadata"]["labels"];
    let model = labels[crate::core::labels::INSTANCE_LABEL]
        .as_str()
        .unwrap_or(name);
    let members = if labels[crate::core::tracks::TRACK_LABEL].as_str() == Some(CANARY) {
        pods(ctx, ns, model, Track::Only(CANARY))
    } else {
        pods(ctx, ns, model, Track::Except(CANARY))
    };
    let status = groups::as_rollout(lws.status.as_ref(), replicas, size, &members);
    let doc = serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "generation": meta.generation,
            "resourceVersion": meta.resource_version,
            "annotations": whole["metadata"]["annotations"]},
        "spec": {"replicas": replicas, "template": t["leaderTemplate"]},
        "status": status,
    });
    serde_json::from_str(&doc.to_string()).ok()
}

/// The cached LWS of ModelService `name`, as [`as_deployment`] states it.
pub fn cached_state(ctx: &Context, ns: &str, name: &str) -> Option<LeanDeployment> {
    let lws = cached(&LeaderWorkerSetChild::cache(&ctx.stores).store, ns, name)?;
    as_deployment(ctx, &lws)
}

/// Whether a workload (a Deployment, or an LWS as [`as_deployment`] states
/// it) has rolled out and is ready: the one it replaces may then go.
pub fn ready(workload: Option<&LeanDeployment>) -> bool {
    canary_may_go(workload.map(LeanDeployment::state))
}

/// Each group's leader as last seen, and when new leaders came: a group
/// LWS recreates has a new leader. Kept in memory, by namespace/name: an
/// operator that restarts counts again from its start.
#[derive(Default)]
pub struct Recreations(Mutex<HashMap<String, BTreeMap<i32, Seen>>>);

struct Seen {
    leader: String,
    recreated: Vec<Instant>,
}

impl Recreations {
    /// Notes `leaders` (group → leader uid) of ModelService `ns/name` at
    /// `now`; returns how often each group was recreated within the window.
    pub fn observe(
        &self,
        ns: &str,
        name: &str,
        leaders: &BTreeMap<i32, String>,
        now: Instant,
    ) -> BTreeMap<i32, usize> {
        let Ok(mut all) = self.0.lock() else {
            return BTreeMap::new();
        };
        let window = Duration::from_secs(RECREATION_WINDOW_MINUTES * 60);
        let groups = all.entry(super::context::object_key(ns, name)).or_default();
        for (g, uid) in leaders {
            match groups.get_mut(g) {
                Some(seen) if seen.leader != *uid => {
                    seen.leader.clone_from(uid);
                    seen.recreated.push(now);
                }
                Some(_) => {}
                None => {
                    groups.insert(
                        *g,
                        Seen {
                            leader: uid.clone(),
                            recreated: Vec::new(),
                        },
                    );
                }
            }
        }
        for seen in groups.values_mut() {
            seen.recreated.retain(|t| now.duration_since(*t) < window);
        }
        groups
            .iter()
            .map(|(g, seen)| (*g, seen.recreated.len()))
            .collect()
    }

    /// Forgets ModelService `ns/name` (deleted).
    pub fn forget(&self, ns: &str, name: &str) {
        if let Ok(mut all) = self.0.lock() {
            all.remove(&super::context::object_key(ns, name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_leader_is_a_recreation_and_old_ones_expire() {
        let r = Recreations::default();
        let t0 = Instant::now();
        let leaders = |uid: &str| BTreeMap::from([(0, uid.to_string())]);
        assert_eq!(
            r.observe("ns", "m", &leaders("a"), t0),
            BTreeMap::from([(0, 0)])
        );
        assert_eq!(
            r.observe("ns", "m", &leaders("a"), t0),
            BTreeMap::from([(0, 0)])
        );
        assert_eq!(
            r.observe("ns", "m", &leaders("b"), t0),
            BTreeMap::from([(0, 1)])
        );
        assert_eq!(
            r.observe("ns", "m", &leaders("c"), t0),
            BTreeMap::from([(0, 2)])
        );
        let later = t0 + Duration::from_secs(RECREATION_WINDOW_MINUTES * 60 + 1);
        assert_eq!(
            r.observe("ns", "m", &leaders("c"), later),
            BTreeMap::from([(0, 0)])
        );
        r.forget("ns", "m");
        assert_eq!(
            r.observe("ns", "m", &leaders("d"), later),
            BTreeMap::from([(0, 0)])
        );
    }
}
