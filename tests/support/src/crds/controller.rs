//! What apiextensions-apiserver's controllers do after a CRD is written:
//! serve the type and report it Established, or, once the CRD is being
//! deleted, delete its objects and then let the CRD go, and stop serving.
//!
//! Every stored write of a CRD (and of an object whose CRD is being
//! deleted) queues the CRD's name; a task of its own works the queue, so
//! like on a real server the type appears, and disappears, just after the
//! write that caused it, never inside it.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{CLEANUP_FINALIZER, crd_key, derive, is_crd_type, set_condition};
use crate::meta;
use crate::ops::delete::{DeleteOpts, delete_object};
use crate::ops::update::{Tracking, finish_update};
use crate::ops::{Ctx, Sub};
use crate::resources::ResKey;
use crate::shared::Shared;
use crate::store::{ObjKey, Store};

/// Objects deleted per lock acquisition while a CRD is cleaned up, so
/// writers are not starved.
const BUDGET: usize = 256;

/// The manager the real server records for its own status writes.
const MANAGER: &str = "kube-apiserver";

pub(crate) fn spawn(shared: Arc<Shared>) {
    let wake = shared.lock().crd_wake.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = wake.notified() => {}
                _ = shared.stopped() => return,
            }
            loop {
                let more = {
                    let mut store = shared.lock();
                    match store.crds_pending.pop_first() {
                        Some(name) => {
                            reconcile(&mut store, &name);
                            !store.crds_pending.is_empty()
                        }
                        None => false,
                    }
                };
                if !more {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    });
}

/// Called for every stored change: queues the CRD it concerns, if any.
pub(crate) fn note_write(store: &mut Store, key: &ObjKey) {
    let name = if is_crd_type(&key.res) {
        key.name.clone()
    } else {
        // Objects created or removed while their CRD is being deleted keep
        // its cleanup going.
        let custom = store.resources.get(&key.res).is_some_and(|s| s.info.custom);
        if !custom {
            return;
        }
        let name = format!("{}.{}", key.res.plural, key.res.group);
        if !store
            .get(&crd_key(&name))
            .is_some_and(|c| meta::is_deleting(&c))
        {
            return;
        }
        name
    };
    if store.crds_pending.insert(name) {
        store.crd_wake.notify_one();
    }
}

/// Brings the type of CRD `name` (always `plural.group`) in line with the
/// stored CRD.
pub(crate) fn reconcile(store: &mut Store, name: &str) {
    let Some((plural, group)) = name.split_once('.') else {
        return;
    };
    let res = ResKey::new(group, plural);
    match store.get(&crd_key(name)) {
        None => remove_type(store, &res),
        Some(crd) if meta::is_deleting(&crd) => terminate(store, name, &res, &crd),
        Some(crd) => establish(store, name, &res, &crd),
    }
}

/// Stops serving a type that a CRD declared. Built-in types stay: a real
/// server never lets a CRD replace them.
fn remove_type(store: &mut Store, res: &ResKey) {
    if store
        .info(&res.group, &res.plural)
        .is_some_and(|i| i.custom)
    {
        store.uninstall(res);
    }
}

fn establish(store: &mut Store, name: &str, res: &ResKey, crd: &Value) {
    let Some(mut info) = derive(crd) else {
        return;
    };
    if info.key() != *res {
        return;
    }
    match store.info(&res.group, &res.plural) {
        Some(current) if !current.custom => return,
        Some(current) => {
            // The conversion hook stands for the webhook the test serves;
            // the CRD's own conversion stanza cannot be called from here.
            if let Some(hook) = current.converter() {
                info = info.with_converter(hook.clone());
            }
            // Replacing keeps the objects and watches, but an unchanged
            // CRD (a re-apply) leaves the type alone altogether.
            if *current != info {
                store.install(info);
            }
        }
        None => store.install(info),
    }
    let mut wanted = crd.clone();
    if let Some(names) = crd.pointer("/spec/names").cloned()
        && let Some(obj) = wanted.as_object_mut()
    {
        let status = obj.entry("status").or_insert_with(|| json!({}));
        if let Some(s) = status.as_object_mut() {
            s.insert("acceptedNames".into(), names);
        }
    }
    set_condition(
        &mut wanted,
        "NamesAccepted",
        "NoConflicts",
        "no conflicts found",
    );
    set_condition(
        &mut wanted,
        "Established",
        "InitialNamesAccepted",
        "the initial names have been accepted",
    );
    write_status(store, name, wanted);
}

/// The cleanup of a CRD being deleted: its objects are deleted (those with
/// finalizers wait for them), then the cleanup finalizer goes and with the
/// CRD's last finalizer the CRD and its type.
fn terminate(store: &mut Store, name: &str, res: &ResKey, crd: &Value) {
    if !meta::finalizers(crd).iter().any(|f| f == CLEANUP_FINALIZER) {
        // Cleaned up already (or its finalizer was removed by hand): the
        // type is served until the CRD itself is gone.
        return;
    }
    let mut wanted = crd.clone();
    if set_condition(
        &mut wanted,
        "Terminating",
        "InstanceDeletionInProgress",
        "CustomResource deletion is in progress",
    ) {
        write_status(store, name, wanted);
    }
    let custom = store
        .info(&res.group, &res.plural)
        .is_some_and(|i| i.custom);
    if custom {
        let live: Vec<ObjKey> = store
            .resources
            .get(res)
            .map(|s| {
                s.objects
                    .iter()
                    .filter(|(_, o)| !meta::is_deleting(o))
                    .take(BUDGET)
                    .map(|((ns, n), _)| ObjKey {
                        res: res.clone(),
                        namespace: ns.clone(),
                        name: n.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let more = live.len() == BUDGET;
        for key in &live {
            let _ = delete_object(store, key, &DeleteOpts::default());
        }
        if more {
            store.crds_pending.insert(name.to_string());
            store.crd_wake.notify_one();
            return;
        }
        if store
            .resources
            .get(res)
            .is_some_and(|s| !s.objects.is_empty())
        {
            // Finalizers hold some; their removal queues this CRD again.
            return;
        }
    }
    let key = crd_key(name);
    let Some(current) = store.get(&key) else {
        return;
    };
    let mut obj = (*current).clone();
    let rest: Vec<String> = meta::finalizers(&obj)
        .into_iter()
        .filter(|f| f != CLEANUP_FINALIZER)
        .collect();
    meta::set_finalizers(&mut obj, &rest);
    if rest.is_empty() {
        store.commit_remove(&key, obj);
        remove_type(store, res);
    } else {
        store.commit(&key, obj);
    }
}

/// Writes `wanted`'s status through `/status`, as the real controllers do
/// (a no-op write stores nothing).
fn write_status(store: &mut Store, name: &str, wanted: Value) {
    let Some(info) = store.info(super::GROUP, super::PLURAL) else {
        return;
    };
    let ctx = Ctx::new(info, "", Sub::Status, MANAGER);
    let Ok(cur) = ctx.load(store, name) else {
        return;
    };
    let mut candidate = (*cur.view).clone();
    if let (Some(c), Some(status)) = (candidate.as_object_mut(), wanted.get("status")) {
        c.insert("status".into(), status.clone());
    }
    let _ = finish_update(store, &ctx, &cur, candidate, Tracking::Update);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::default_resources;

    fn drain(store: &mut Store) {
        while let Some(name) = store.crds_pending.pop_first() {
            reconcile(store, &name);
        }
    }

    #[test]
    fn a_crd_for_a_built_in_type_leaves_it_alone() {
        let mut s = Store::new(
            default_resources(),
            Arc::new(tokio::sync::Notify::new()),
            1000,
        );
        // Validation refuses this group; stored by other means, it still
        // must not take over the built-in type.
        let crd = json!({"metadata": {"name": "deployments.apps", "uid": "u1"},
            "spec": {"group": "apps", "scope": "Namespaced",
                "names": {"plural": "deployments", "kind": "Deployment"},
                "versions": [{"name": "v9", "served": true, "storage": true}]}});
        s.commit(&crd_key("deployments.apps"), crd.clone());
        drain(&mut s);
        assert_eq!(
            s.info("apps", "deployments").expect("served").versions,
            ["v1"]
        );
        s.commit_remove(&crd_key("deployments.apps"), crd);
        drain(&mut s);
        assert!(s.info("apps", "deployments").is_some());
    }
}
