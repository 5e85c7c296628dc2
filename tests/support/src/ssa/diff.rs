//! Which field paths a non-apply write changed.
//!
//! For updates and patches the real server gives the writing manager the
//! fields it changed (operation `Update`) and takes them away from everyone
//! else; that transfer is what later makes an applier conflict with, e.g.,
//! a `kubectl scale`. This computes the changed and removed paths.

use serde_json::Value;

use super::fieldset::{FieldPath, FieldSet, PathElem, paths_of, tracked_view};
use crate::listkeys::{ListKind, item_key, list_kind};

/// Paths set or changed by going from `old` to `new`, and paths that
/// disappeared.
#[derive(Debug, Default)]
pub struct Changes {
    pub changed: FieldSet,
    pub removed: FieldSet,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }
}

/// Diffs the tracked views of two objects.
pub fn diff_objects(old: &Value, new: &Value) -> Changes {
    let mut c = Changes::default();
    let (a, b) = (tracked_view(old), tracked_view(new));
    diff_maps(&a, &b, &mut Vec::new(), &mut c);
    c
}

fn all_paths(v: &Value, prefix: &mut FieldPath, field: &str, out: &mut FieldSet) {
    paths_of(v, prefix, field, out);
}

fn diff_maps(a: &Value, b: &Value, prefix: &mut FieldPath, c: &mut Changes) {
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return;
    };
    for (k, bv) in bm {
        prefix.push(PathElem::Field(k.clone()));
        match am.get(k) {
            Some(av) => diff_value(av, bv, prefix, k, c),
            None => all_paths(bv, prefix, k, &mut c.changed),
        }
        prefix.pop();
    }
    for (k, av) in am {
        if !bm.contains_key(k) {
            prefix.push(PathElem::Field(k.clone()));
            all_paths(av, prefix, k, &mut c.removed);
            c.removed.insert(prefix.clone());
            prefix.pop();
        }
    }
}

fn diff_value(a: &Value, b: &Value, prefix: &mut FieldPath, field: &str, c: &mut Changes) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(am), Value::Object(bm)) if !am.is_empty() && !bm.is_empty() => {
            diff_maps(a, b, prefix, c)
        }
        (Value::Array(x), Value::Array(y)) => match list_kind(field, x, y) {
            ListKind::Keyed(key) => diff_keyed(x, y, key, prefix, c),
            ListKind::Set => {
                for item in y.iter().filter(|i| !x.contains(i)) {
                    prefix.push(PathElem::Value(item.to_string()));
                    c.changed.insert(prefix.clone());
                    prefix.pop();
                }
                for item in x.iter().filter(|i| !y.contains(i)) {
                    prefix.push(PathElem::Value(item.to_string()));
                    c.removed.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListKind::Atomic => c.changed.insert(prefix.clone()),
        },
        _ => {
            all_paths(a, prefix, field, &mut c.removed);
            all_paths(b, prefix, field, &mut c.changed);
        }
    }
}

fn diff_keyed(x: &[Value], y: &[Value], key: &str, prefix: &mut FieldPath, c: &mut Changes) {
    let find = |items: &[Value], k: &str| {
        items
            .iter()
            .find(|i| item_key(i, key).as_deref() == Some(k))
            .cloned()
    };
    for item in y {
        let Some(k) = item_key(item, key) else {
            continue;
        };
        prefix.push(PathElem::Key(k.clone()));
        match find(x, &k) {
            Some(old) => diff_maps(&old, item, prefix, c),
            None => {
                c.changed.insert(prefix.clone());
                if let Some(m) = item.as_object() {
                    for (f, v) in m {
                        prefix.push(PathElem::Field(f.clone()));
                        all_paths(v, prefix, f, &mut c.changed);
                        prefix.pop();
                    }
                }
            }
        }
        prefix.pop();
    }
    for item in x {
        let Some(k) = item_key(item, key) else {
            continue;
        };
        if find(y, &k).is_none() {
            prefix.push(PathElem::Key(k));
            c.removed.insert(prefix.clone());
            prefix.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElem {
        PathElem::Field(s.into())
    }

    #[test]
    fn detects_changed_and_removed() {
        let old = json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 1}});
        let new = json!({"metadata": {"name": "x", "labels": {"a": "1", "c": "3"}}, "spec": {"replicas": 2}});
        let c = diff_objects(&old, &new);
        assert!(c.changed.contains(&vec![f("spec"), f("replicas")]));
        assert!(
            c.changed
                .contains(&vec![f("metadata"), f("labels"), f("c")])
        );
        assert!(
            c.removed
                .contains(&vec![f("metadata"), f("labels"), f("b")])
        );
        assert!(
            !c.changed
                .contains(&vec![f("metadata"), f("labels"), f("a")])
        );
    }

    #[test]
    fn identical_objects_have_no_changes() {
        let o = json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
        assert!(diff_objects(&o, &o).is_empty());
    }
}
