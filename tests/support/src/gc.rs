//! The garbage collector, as kube-controller-manager runs it.
//!
//! Runs as its own task, woken by writes that queued work (an owner went
//! away, an object was created with a dangling owner, a namespace or a
//! foreground deletion is pending), never inside the request that caused
//! it — so clients observe the same asynchrony as on a real cluster. The
//! owner → dependents index keeps each step proportional to the objects
//! involved, not to the size of the store.

use std::sync::Arc;

use serde_json::Value;

use crate::meta::{self, meta_mut};
use crate::ops::delete::{DeleteOpts, delete_object};
use crate::shared::Shared;
use crate::store::{NamespacePhase, ObjKey, Store, is_foreground_deleting};

/// Objects handled per lock acquisition, so writers are not starved.
const BUDGET: usize = 256;

pub(crate) fn spawn(shared: Arc<Shared>) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shared.gc_wake.notified() => {}
                _ = shared.stopped() => return,
            }
            while step(&mut shared.lock(), BUDGET) {
                tokio::task::yield_now().await;
            }
        }
    });
}

/// Does up to `budget` units of work; returns whether work remains.
pub(crate) fn step(store: &mut Store, budget: usize) -> bool {
    let mut left = budget;
    while left > 0 {
        if let Some(uid) = store.gc.owners_gone.pop() {
            let deps = store.dependents_of(&uid);
            store.gc.check.extend(deps);
            continue;
        }
        if let Some(key) = store.gc.check.pop() {
            collect_if_orphaned(store, &key);
            left -= 1;
            continue;
        }
        if let Some(key) = store.gc.foreground.pop() {
            left = left.saturating_sub(foreground_step(store, &key, left));
            continue;
        }
        if let Some(ns) = store.gc.namespaces.pop() {
            store.gc.namespaces.retain(|n| *n != ns);
            left = left.saturating_sub(namespace_step(store, &ns, left));
            continue;
        }
        break;
    }
    !store.gc.is_empty()
}

/// Deletes an object whose owners are all gone; drops dangling references
/// when some owners remain.
fn collect_if_orphaned(store: &mut Store, key: &ObjKey) {
    let Some(obj) = store.get(key) else {
        return;
    };
    let owners = meta::owner_uids(&obj);
    if owners.is_empty() {
        return;
    }
    let (alive, dangling): (Vec<_>, Vec<_>) =
        owners.iter().partition(|o| store.uids.contains_key(*o));
    if alive.is_empty() {
        if !meta::is_deleting(&obj) {
            let _ = delete_object(store, key, &DeleteOpts::default());
        }
    } else if !dangling.is_empty() {
        let mut obj = (*obj).clone();
        if let Some(refs) = meta_mut(&mut obj)
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| {
                r.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| !dangling.iter().any(|d| *d == u))
            });
        }
        store.commit(key, obj);
    }
}

/// Removes `finalizer`; removes the object if it was the last one.
fn drop_finalizer(store: &mut Store, key: &ObjKey, obj: &Value, finalizer: &str) {
    let mut obj = obj.clone();
    let rest: Vec<String> = meta::finalizers(&obj)
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    meta::set_finalizers(&mut obj, &rest);
    if rest.is_empty() {
        store.commit_remove(key, obj);
    } else {
        store.commit(key, obj);
    }
}

/// Foreground deletion: delete dependents first, then let the owner go.
fn foreground_step(store: &mut Store, key: &ObjKey, budget: usize) -> usize {
    let Some(obj) = store.get(key) else {
        return 1;
    };
    if !is_foreground_deleting(&obj) {
        return 1;
    }
    let deps = store.dependents_of(meta::uid(&obj));
    if deps.is_empty() {
        drop_finalizer(store, key, &obj, "foregroundDeletion");
        return 1;
    }
    let mut done = 0;
    for dep in deps.iter().take(budget) {
        if store.get(dep).is_some_and(|d| !meta::is_deleting(&d)) {
            let _ = delete_object(store, dep, &DeleteOpts::default());
        }
        done += 1;
    }
    if deps.len() > budget {
        store.gc.foreground.push(key.clone());
    }
    done.max(1)
}

/// Namespace termination: delete everything inside, then the namespace.
fn namespace_step(store: &mut Store, ns: &str, budget: usize) -> usize {
    if store.namespace_phase(ns) != NamespacePhase::Terminating {
        return 1;
    }
    let mut inside = Vec::new();
    for (res, state) in &store.resources {
        let start = (ns.to_string(), String::new());
        for ((n, name), obj) in state.objects.range(start..) {
            if n != ns {
                break;
            }
            if !meta::is_deleting(obj) {
                inside.push(ObjKey {
                    res: res.clone(),
                    namespace: ns.to_string(),
                    name: name.clone(),
                });
            }
        }
    }
    let remaining = store.resources.values().any(|s| {
        s.objects
            .range((ns.to_string(), String::new())..)
            .next()
            .is_some_and(|((n, _), _)| n == ns)
    });
    if !remaining {
        let key = ObjKey {
            res: crate::resources::ResKey::new("", "namespaces"),
            namespace: String::new(),
            name: ns.to_string(),
        };
        if let Some(obj) = store.get(&key)
            && meta::finalizers(&obj).is_empty()
        {
            store.commit_remove(&key, (*obj).clone());
        }
        return 1;
    }
    let mut done = 0;
    for key in inside.iter().take(budget) {
        let _ = delete_object(store, key, &DeleteOpts::default());
        done += 1;
    }
    if inside.len() > budget {
        store.gc.namespaces.push(ns.to_string());
    }
    done.max(1)
}
