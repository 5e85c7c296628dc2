//! The only code that changes stored objects.
//!
//! Every change goes through [`Store::commit`] or [`Store::commit_remove`],
//! which bump the global resourceVersion, keep the indexes right, record the
//! event for watches and queue garbage-collection work. Keeping this in one
//! place is what makes "every stored change bumps resourceVersion and emits
//! exactly one event" hold.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{ChangeEvent, Event, EventType, ObjKey, Store};
use crate::meta;

/// Whether an object waits for its dependents (foreground deletion).
pub(crate) fn is_foreground_deleting(obj: &Value) -> bool {
    meta::is_deleting(obj)
        && meta::finalizers(obj)
            .iter()
            .any(|f| f == "foregroundDeletion")
}

impl Store {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Stores `obj` under `key` (ADDED if new, else MODIFIED) with a fresh
    /// resourceVersion, and returns the stored object.
    pub fn commit(&mut self, key: &ObjKey, mut obj: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let obj = Arc::new(obj);
        let Some(state) = self.resources.get_mut(&key.res) else {
            return obj;
        };
        let prev = state
            .objects
            .insert((key.namespace.clone(), key.name.clone()), obj.clone());
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.reindex(key, prev.as_deref(), Some(&obj));
        self.emit(key, kind, obj.clone(), prev, rv);
        crate::crds::note_write(self, key);
        obj
    }

    /// Removes the object (DELETED event). `last` is its final state; it is
    /// stamped with the deletion's resourceVersion, as the real server does.
    pub fn commit_remove(&mut self, key: &ObjKey, mut last: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        let last = Arc::new(last);
        let Some(state) = self.resources.get_mut(&key.res) else {
            return last;
        };
        let prev = state
            .objects
            .remove(&(key.namespace.clone(), key.name.clone()));
        self.reindex(key, prev.as_deref(), None);
        self.emit(key, EventType::Deleted, last.clone(), prev, rv);
        crate::crds::note_write(self, key);
        last
    }

    fn emit(
        &mut self,
        key: &ObjKey,
        kind: EventType,
        obj: Arc<Value>,
        prev: Option<Arc<Value>>,
        rv: u64,
    ) {
        let limit = self.history_limit;
        let Some(state) = self.resources.get_mut(&key.res) else {
            return;
        };
        let event = Arc::new(Event::new(rv, kind, obj.clone(), prev));
        state.history.push_back(event.clone());
        while state.history.len() > limit {
            if let Some(old) = state.history.pop_front() {
                state.compacted = state.compacted.max(old.rv);
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = state.tx.send(event);
        let _ = self.changes.send(ChangeEvent {
            event_type: kind,
            group: key.res.group.clone(),
            plural: key.res.plural.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            resource_version: rv,
            object: obj,
        });
    }

    /// Keeps the uid and owner indexes in step with a change, and queues
    /// whatever the garbage collector has to look at because of it.
    fn reindex(&mut self, key: &ObjKey, old: Option<&Value>, new: Option<&Value>) {
        let old_owners: HashSet<String> = old
            .map(meta::owner_uids)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let new_owners: HashSet<String> = new
            .map(meta::owner_uids)
            .unwrap_or_default()
            .into_iter()
            .collect();
        for o in old_owners.difference(&new_owners) {
            if let Some(set) = self.dependents.get_mut(o) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(o);
                }
            }
        }
        for o in new_owners.difference(&old_owners) {
            self.dependents
                .entry(o.clone())
                .or_default()
                .insert(key.clone());
        }
        match new {
            Some(obj) => {
                self.uids.insert(meta::uid(obj).to_string(), key.clone());
                if new_owners.iter().any(|o| !self.uids.contains_key(o)) {
                    self.gc.check.push(key.clone());
                }
                if is_foreground_deleting(obj) {
                    self.gc.foreground.push(key.clone());
                }
                if key.res.group.is_empty()
                    && key.res.plural == "namespaces"
                    && meta::is_deleting(obj)
                {
                    self.gc.namespaces.push(key.name.clone());
                }
            }
            None => {
                if let Some(obj) = old {
                    let uid = meta::uid(obj).to_string();
                    self.uids.remove(&uid);
                    if self.dependents.contains_key(&uid) {
                        self.gc.owners_gone.push(uid);
                    }
                    // An owner deleting in the foreground may now be free to go.
                    for o in &old_owners {
                        if let Some(owner_key) = self.uids.get(o).cloned()
                            && self
                                .get(&owner_key)
                                .is_some_and(|v| is_foreground_deleting(&v))
                        {
                            self.gc.foreground.push(owner_key);
                        }
                    }
                }
                if !key.namespace.is_empty()
                    && self.namespace_phase(&key.namespace) == super::NamespacePhase::Terminating
                {
                    self.gc.namespaces.push(key.namespace.clone());
                }
            }
        }
        if !self.gc.is_empty() {
            self.gc_wake.notify_one();
        }
    }
}
