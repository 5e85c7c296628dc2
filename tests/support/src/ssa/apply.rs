//! Server-side apply: field ownership, conflicts, removal of dropped fields.
//!
//! A simplified but faithful model of the real algorithm:
//! * the applier's field set is exactly the paths of its configuration;
//! * a field it owned before but omits now is removed, unless another
//!   manager still owns it (or something beneath it);
//! * setting a field another manager owns to a *different* value is a
//!   conflict (409) unless `force`, which moves ownership; equal values
//!   become co-owned;
//! * nothing else changes, so applying the same configuration twice yields an
//!   identical object (the caller then skips the write entirely).

use serde_json::{Value, json};

use super::fieldset::{FieldPath, FieldSet, PathElem, get_at, object_paths, remove_at};
use super::managed::{self, Entry};
use super::merge::merge_map;
use crate::meta::now_rfc3339;
use crate::status::ApiError;

/// Parameters of one apply request.
#[derive(Clone, Debug)]
pub struct ApplyParams<'a> {
    pub manager: &'a str,
    pub force: bool,
    pub api_version: &'a str,
    /// `""` or `status`.
    pub subresource: &'a str,
}

struct Conflict {
    manager: String,
    path: FieldPath,
}

/// Human form of a path, as the real server prints it (`.spec.replicas`,
/// `.spec.containers[name="c"].image`).
pub fn path_string(path: &[PathElem]) -> String {
    let mut s = String::new();
    for e in path {
        match e {
            PathElem::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            PathElem::Key(k) => {
                let inner = serde_json::from_str::<Value>(k)
                    .ok()
                    .and_then(|v| v.as_object().cloned())
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                s.push_str(&format!("[{inner}]"));
            }
            PathElem::Value(v) => s.push_str(&format!("[={v}]")),
        }
    }
    s
}

fn describe(e: &Entry) -> String {
    let mut s = format!("{:?}", e.manager);
    if !e.subresource.is_empty() {
        s.push_str(&format!(" with subresource {:?}", e.subresource));
    }
    if e.operation == "Update" {
        s.push_str(&format!(" using {}", e.api_version));
    }
    s
}

fn conflict_error(conflicts: &[Conflict]) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {}", c.manager),
                "field": path_string(&c.path),
            })
        })
        .collect();
    let message = if let [c] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.manager,
            path_string(&c.path)
        )
    } else {
        let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            for c in conflicts.iter().filter(|c| c.manager == m) {
                lines.push(format!("- {}", path_string(&c.path)));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let mut err = ApiError::new(409, "Conflict", message);
    err.details = Some(json!({"causes": causes}));
    err
}

/// Applies `config` (already restricted to what this endpoint may change)
/// over `live` (None: the object is being created). Returns the new object,
/// including its updated `managedFields`.
pub fn apply(live: Option<&Value>, config: &Value, p: &ApplyParams) -> Result<Value, ApiError> {
    let empty = json!({});
    let base = live.unwrap_or(&empty);
    let new_set = object_paths(config);
    let mut entries = managed::read(base);
    let mine = entries
        .iter()
        .position(|e| e.is(p.manager, "Apply", p.api_version, p.subresource));
    let old_set = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();

    // Conflicts: another manager owns a field we set to a different value.
    let mut conflicts = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine {
            continue;
        }
        for path in new_set.iter().filter(|p| e.fields.contains(p)) {
            if matches!(path.last(), Some(PathElem::Key(_) | PathElem::Value(_))) {
                continue;
            }
            if get_at(base, path) != get_at(config, path) {
                conflicts.push((i, path.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !p.force {
            let list: Vec<Conflict> = conflicts
                .iter()
                .map(|(i, path)| Conflict {
                    manager: describe(&entries[*i]),
                    path: path.clone(),
                })
                .collect();
            return Err(conflict_error(&list));
        }
        for (i, path) in &conflicts {
            entries[*i].fields.remove_subtree(path);
        }
    }

    // Fields we stopped applying go away unless someone else still owns them.
    let mut result = base.clone();
    let others: FieldSet = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != mine)
        .fold(FieldSet::default(), |mut acc, (_, e)| {
            acc.extend(&e.fields);
            acc
        });
    let dropped = old_set.difference(&new_set);
    let mut doomed: Vec<&FieldPath> = dropped.iter().filter(|p| !others.covers(p)).collect();
    // Shallow first: removing a list item takes its fields with it (removing
    // the fields first would leave an item without its key).
    doomed.sort_by_key(|p| p.len());
    for path in &doomed {
        remove_at(&mut result, path);
    }
    // A map we created and no longer apply goes with its last field (the
    // real server tracks the map itself as owned, `f:autoscaling: {.: {}}`).
    for path in &doomed {
        for end in (1..path.len()).rev() {
            let parent = &path[..end];
            let emptied = get_at(&result, parent)
                .is_some_and(|v| v.as_object().is_some_and(|m| m.is_empty()));
            if emptied
                && get_at(config, parent).is_none()
                && matches!(parent.last(), Some(PathElem::Field(_)))
            {
                remove_at(&mut result, parent);
            } else {
                break;
            }
        }
    }

    merge_map(&mut result, config);

    let entry_changed = old_set != new_set || mine.is_none();
    let idx = match mine {
        Some(i) => i,
        None => {
            entries.push(Entry::new(p.manager, "Apply", p.api_version, p.subresource));
            entries.len() - 1
        }
    };
    entries[idx].fields = new_set;
    entries[idx].api_version = p.api_version.to_string();
    if entry_changed || !conflicts.is_empty() || without_managed(&result) != without_managed(base) {
        entries[idx].time = now_rfc3339();
    }
    managed::write(&mut result, &entries);
    Ok(result)
}

fn without_managed(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(manager: &str, force: bool) -> ApplyParams<'_> {
        ApplyParams {
            manager,
            force,
            api_version: "v1",
            subresource: "",
        }
    }

    #[test]
    fn removes_dropped_fields_and_keeps_others() {
        let cfg1 =
            json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "data": {"k": "v"}});
        let o1 = apply(None, &cfg1, &params("m", false)).unwrap();
        let cfg2 = json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k": "v"}});
        let o2 = apply(Some(&o1), &cfg2, &params("m", false)).unwrap();
        assert_eq!(o2["metadata"]["labels"], json!({"a": "1"}));
        let o3 = apply(Some(&o2), &cfg2, &params("m", false)).unwrap();
        assert_eq!(o3, o2, "re-applying is a no-op");
    }

    #[test]
    fn a_dropped_map_goes_with_its_last_field() {
        let first = apply(
            None,
            &json!({"spec": {"a": 1, "auto": {"max": 2}}}),
            &params("u", false),
        )
        .expect("apply");
        let second = apply(
            Some(&first),
            &json!({"spec": {"a": 1}}),
            &params("u", false),
        )
        .expect("apply");
        assert_eq!(second["spec"], json!({"a": 1}));
    }

    #[test]
    fn conflicts_unless_forced() {
        let o1 = apply(None, &json!({"data": {"k": "1"}}), &params("a", false)).unwrap();
        let same = apply(Some(&o1), &json!({"data": {"k": "1"}}), &params("b", false));
        assert!(same.is_ok(), "equal values are shared, not conflicting");
        let err = apply(Some(&o1), &json!({"data": {"k": "2"}}), &params("b", false)).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"a\": .data.k"
        );
        let forced = apply(Some(&o1), &json!({"data": {"k": "2"}}), &params("b", true)).unwrap();
        assert_eq!(forced["data"]["k"], "2");
        let entries = managed::read(&forced);
        assert_eq!(entries.len(), 1, "a lost its only field");
        assert_eq!(entries[0].manager, "b");
    }

    #[test]
    fn shared_fields_survive_removal_by_one_owner() {
        let o1 = apply(None, &json!({"data": {"k": "1"}}), &params("a", false)).unwrap();
        let o2 = apply(Some(&o1), &json!({"data": {"k": "1"}}), &params("b", false)).unwrap();
        let o3 = apply(Some(&o2), &json!({}), &params("a", false)).unwrap();
        assert_eq!(o3["data"]["k"], "1");
    }
}
