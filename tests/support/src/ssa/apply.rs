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
//!   identical object (the caller then skips the write entirely);
//! * managers that wrote at another version of the type own paths of that
//!   version, so conflicts with them and what they keep are decided on the
//!   object converted to their version, as the real server does.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Views;
use super::diff::{Changes, diff_objects};
use super::fieldset::{FieldPath, FieldSet, PathElem, get_at, object_paths, remove_at};
use super::managed::{self, Entry};
use super::merge::merge_map;
use crate::meta::now_rfc3339;
use crate::status::ApiError;

/// Parameters of one apply request.
#[derive(Clone)]
pub struct ApplyParams<'a> {
    pub manager: &'a str,
    pub force: bool,
    pub api_version: &'a str,
    /// `""` or `status`.
    pub subresource: &'a str,
    pub views: &'a dyn Views,
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
/// over `live` (None: the object is being created), both at the request's
/// version. Returns the new object, including its updated `managedFields`.
pub fn apply(live: Option<&Value>, config: &Value, p: &ApplyParams) -> Result<Value, ApiError> {
    let empty = json!({});
    let base = live.unwrap_or(&empty);
    let new_set = object_paths(config);
    let mut entries = managed::read(base);
    let mine = entries
        .iter()
        .position(|e| e.is(p.manager, "Apply", p.api_version, p.subresource));
    let old_set = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();
    let last_version = mine.map_or(p.api_version, |i| entries[i].api_version.as_str());
    let last_version = if p.views.converts_to(last_version) {
        last_version.to_string()
    } else {
        p.api_version.to_string()
    };
    let elsewhere = |av: &str| av != p.api_version && p.views.converts_to(av);

    // Conflicts: another manager owns a field we set to a different value.
    // Managers at other versions are compared at their version, below.
    let mut conflicts = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine || elsewhere(&e.api_version) {
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
    if p.force {
        for (i, path) in &conflicts {
            entries[*i].fields.remove_subtree(path);
        }
    }

    let mut result = prune(
        base,
        config,
        &entries,
        mine,
        &old_set,
        &new_set,
        &last_version,
        p,
    )?;
    merge_map(&mut result, config);

    // Managers at other versions: what this apply changes in their view of
    // the object conflicts with what they own there; what it removes there
    // they no longer own.
    let mut views: BTreeMap<String, Changes> = BTreeMap::new();
    let mut gone = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine || !elsewhere(&e.api_version) {
            continue;
        }
        if !views.contains_key(&e.api_version) {
            let before = p.views.view(base, &e.api_version)?;
            let after = p.views.view(&result, &e.api_version)?;
            views.insert(e.api_version.clone(), diff_objects(&before, &after));
        }
        let Some(changes) = views.get(&e.api_version) else {
            continue;
        };
        for path in changes.changed.iter().filter(|p| e.fields.contains(p)) {
            if !matches!(path.last(), Some(PathElem::Key(_) | PathElem::Value(_))) {
                conflicts.push((i, path.clone()));
            }
        }
        gone.extend(changes.removed.iter().map(|path| (i, path.clone())));
    }
    if !conflicts.is_empty() && !p.force {
        let list: Vec<Conflict> = conflicts
            .iter()
            .map(|(i, path)| Conflict {
                manager: describe(&entries[*i]),
                path: path.clone(),
            })
            .collect();
        return Err(conflict_error(&list));
    }
    for (i, path) in conflicts.iter().chain(gone.iter()) {
        entries[*i].fields.remove_subtree(path);
    }

    let switched = mine.is_some_and(|i| entries[i].api_version != p.api_version);
    let entry_changed = old_set != new_set || mine.is_none() || switched;
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

/// `base` without the fields the applier applied last time (its entry's
/// `old_set`, recorded at `last_version`) and omits now, unless another
/// manager still owns them. Works at the last set's version, as the real
/// server prunes; owners at other versions keep a field when removing it
/// would change something of theirs in their view of the object. When the
/// applier switched versions its configuration is converted to the last
/// set's version to tell what it dropped; if that conversion fails nothing
/// is pruned.
#[allow(clippy::too_many_arguments)]
fn prune(
    base: &Value,
    config: &Value,
    entries: &[Entry],
    mine: Option<usize>,
    old_set: &FieldSet,
    new_set: &FieldSet,
    at: &str,
    p: &ApplyParams,
) -> Result<Value, ApiError> {
    let here = at == p.api_version;
    let config_at = if here {
        Some(config.clone())
    } else {
        p.views.view(config, at).ok()
    };
    let Some(config_at) = config_at else {
        return Ok(base.clone());
    };
    let dropped = if here {
        old_set.difference(new_set)
    } else {
        old_set.difference(&object_paths(&config_at))
    };
    if dropped.is_empty() {
        return Ok(base.clone());
    }
    // Everyone else's fields, by the version they are recorded at.
    let mut owners: BTreeMap<&str, FieldSet> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine {
            continue;
        }
        let v = if p.views.converts_to(&e.api_version) {
            e.api_version.as_str()
        } else {
            p.api_version
        };
        owners.entry(v).or_default().extend(&e.fields);
    }
    if !here {
        owners.entry(p.api_version).or_default().extend(new_set);
    }
    let mut cur = if here {
        base.clone()
    } else {
        p.views.view(base, at)?
    };
    let others: Vec<(&str, &FieldSet)> = owners
        .iter()
        .filter(|(v, _)| **v != at)
        .map(|(v, s)| (*v, s))
        .collect();
    let mut seen: Vec<Value> = others
        .iter()
        .map(|(v, _)| p.views.view(&cur, v))
        .collect::<Result<_, _>>()?;

    let mut doomed: Vec<&FieldPath> = dropped
        .iter()
        .filter(|path| !owners.get(at).is_some_and(|s| s.covers(path)))
        .collect();
    // Shallow first: removing a list item takes its fields with it (removing
    // the fields first would leave an item without its key).
    doomed.sort_by_key(|path| path.len());
    let mut removed = Vec::new();
    for path in doomed {
        let mut trial = cur.clone();
        remove_at(&mut trial, path);
        if !others.is_empty() {
            let trial_seen: Vec<Value> = others
                .iter()
                .map(|(v, _)| p.views.view(&trial, v))
                .collect::<Result<_, _>>()?;
            let owned_elsewhere = others.iter().zip(seen.iter().zip(&trial_seen)).any(
                |((_, set), (before, after))| {
                    let c = diff_objects(before, after);
                    c.changed
                        .iter()
                        .chain(c.removed.iter())
                        .any(|q| set.covers(q))
                },
            );
            if owned_elsewhere {
                continue;
            }
            seen = trial_seen;
        }
        cur = trial;
        removed.push(path);
    }
    // A map we created and no longer apply goes with its last field (the
    // real server tracks the map itself as owned, `f:autoscaling: {.: {}}`),
    // and so does a list whose items we applied: the real server owns a
    // list of maps without keys as one atomic field, and removes it whole.
    for path in &removed {
        for end in (1..path.len()).rev() {
            let parent = &path[..end];
            let emptied = get_at(&cur, parent).is_some_and(|v| match v {
                Value::Object(m) => m.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => false,
            });
            if emptied
                && get_at(&config_at, parent).is_none()
                && matches!(parent.last(), Some(PathElem::Field(_)))
            {
                remove_at(&mut cur, parent);
            } else {
                break;
            }
        }
    }
    if here {
        Ok(cur)
    } else {
        p.views.view(&cur, p.api_version)
    }
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
            views: &crate::ssa::OneVersion,
        }
    }

    /// Two versions: `g/v1` has `spec.model` as a string, `g/v2` as `{name}`.
    struct TwoVersions;

    impl Views for TwoVersions {
        fn converts_to(&self, api_version: &str) -> bool {
            matches!(api_version, "g/v1" | "g/v2")
        }

        fn view(&self, obj: &Value, api_version: &str) -> Result<Value, ApiError> {
            let mut o = obj.clone();
            o["apiVersion"] = json!(api_version);
            if let Some(model) = o.pointer_mut("/spec/model") {
                let name = model
                    .as_str()
                    .or_else(|| model["name"].as_str())
                    .unwrap_or("")
                    .to_string();
                *model = if api_version == "g/v1" {
                    json!(name)
                } else {
                    json!({ "name": name })
                };
            }
            Ok(o)
        }
    }

    fn at<'a>(manager: &'a str, api_version: &'a str, force: bool) -> ApplyParams<'a> {
        ApplyParams {
            manager,
            force,
            api_version,
            subresource: "",
            views: &TwoVersions,
        }
    }

    #[test]
    fn other_versions_owners_are_checked_in_their_version() {
        let v1 = apply(
            None,
            &json!({"apiVersion": "g/v1", "spec": {"model": "x", "image": "i"}}),
            &at("one", "g/v1", false),
        )
        .expect("apply at v1");
        let live = TwoVersions.view(&v1, "g/v2").expect("view");
        let changed = json!({"apiVersion": "g/v2", "spec": {"model": {"name": "y"}}});
        let err = apply(Some(&live), &changed, &at("two", "g/v2", false)).expect_err("conflict");
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"one\": .spec.model"
        );
        // Same value: shared, and "one" dropping its model keeps it.
        let same = json!({"apiVersion": "g/v2", "spec": {"model": {"name": "x"}}});
        let shared = apply(Some(&live), &same, &at("two", "g/v2", false)).expect("shared");
        let back = TwoVersions.view(&shared, "g/v1").expect("view");
        let dropped = apply(
            Some(&back),
            &json!({"apiVersion": "g/v1", "spec": {"image": "i"}}),
            &at("one", "g/v1", false),
        )
        .expect("apply without the model");
        assert_eq!(dropped["spec"], json!({"model": "x", "image": "i"}));
    }

    #[test]
    fn a_manager_switching_versions_drops_what_it_no_longer_applies() {
        let v1 = apply(
            None,
            &json!({"apiVersion": "g/v1", "spec": {"model": "x", "image": "i"}}),
            &at("m", "g/v1", false),
        )
        .expect("apply at v1");
        let live = TwoVersions.view(&v1, "g/v2").expect("view");
        let v2 = apply(
            Some(&live),
            &json!({"apiVersion": "g/v2", "spec": {"model": {"name": "x"}}}),
            &at("m", "g/v2", false),
        )
        .expect("apply at v2");
        assert_eq!(v2["spec"], json!({"model": {"name": "x"}}));
        let entries = managed::read(&v2);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].api_version, "g/v2");
        assert_eq!(
            entries[0].fields.to_fields_v1(),
            json!({"f:spec": {"f:model": {"f:name": {}}}})
        );
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
    fn a_dropped_map_goes_with_the_list_of_maps_in_it() {
        let first = apply(
            None,
            &json!({"spec": {"a": 1, "route": {"refs": [{"name": "gw"}]}}}),
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
