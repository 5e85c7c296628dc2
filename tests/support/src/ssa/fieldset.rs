//! Sets of field paths and their `fieldsV1` encoding.
//!
//! Field ownership is the core of server-side apply: each manager owns a set
//! of paths. Paths are leaves (scalars, atomic lists, empty maps), keyed list
//! items (`k:{"name":"c"}`, the item itself) and set members (`v:"x"`).
//! `fieldsV1` is the same tree the real server writes into `managedFields`.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::listkeys::{ListKind, item_key, list_kind};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElem {
    /// A map key: `f:name`.
    Field(String),
    /// A keyed list item, canonical JSON of its key: `k:{"name":"c"}`.
    Key(String),
    /// A member of a set-like list, as JSON: `v:"finalizer"`.
    Value(String),
}

pub type FieldPath = Vec<PathElem>;

/// A set of owned paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    paths: BTreeSet<FieldPath>,
}

impl FieldSet {
    pub fn insert(&mut self, path: FieldPath) {
        self.paths.insert(path);
    }

    pub fn contains(&self, path: &FieldPath) -> bool {
        self.paths.contains(path)
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &FieldPath> {
        self.paths.iter()
    }

    pub fn extend(&mut self, other: &FieldSet) {
        self.paths.extend(other.paths.iter().cloned());
    }

    /// Paths in `self` but not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            paths: self.paths.difference(&other.paths).cloned().collect(),
        }
    }

    /// Whether `path` itself or anything below it is in the set.
    pub fn covers(&self, path: &FieldPath) -> bool {
        self.paths
            .range(path.clone()..)
            .next()
            .is_some_and(|p| p.starts_with(path))
    }

    /// Removes `path` and everything below it.
    pub fn remove_subtree(&mut self, path: &FieldPath) {
        let doomed: Vec<FieldPath> = self
            .paths
            .range(path.clone()..)
            .take_while(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in doomed {
            self.paths.remove(&p);
        }
    }

    /// The `fieldsV1` tree: members without children are `{}`, members with
    /// children carry `".": {}`.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.paths {
            let mut node = &mut root;
            for elem in path {
                let entry = node
                    .entry(encode(elem))
                    .or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                node = entry.as_object_mut().expect("just made an object");
            }
            // A member whose node already has (or will get) children is marked
            // with "."; fix up below once all paths are in.
            node.entry(".").or_insert_with(|| Value::Object(Map::new()));
        }
        strip_lone_dots(&mut root);
        Value::Object(root)
    }

    /// Parses a `fieldsV1` tree; unknown element prefixes are skipped.
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Some(m) = v.as_object() {
            parse_node(m, &mut Vec::new(), &mut set);
        }
        set
    }
}

fn encode(elem: &PathElem) -> String {
    match elem {
        PathElem::Field(f) => format!("f:{f}"),
        PathElem::Key(k) => format!("k:{k}"),
        PathElem::Value(v) => format!("v:{v}"),
    }
}

/// A node that is only `{".": {}}` is a plain member: write it as `{}`.
fn strip_lone_dots(node: &mut Map<String, Value>) {
    for (_, child) in node.iter_mut() {
        if let Some(m) = child.as_object_mut() {
            if m.len() == 1 && m.contains_key(".") {
                m.clear();
            } else {
                strip_lone_dots(m);
            }
        }
    }
}

fn parse_node(node: &Map<String, Value>, prefix: &mut FieldPath, out: &mut FieldSet) {
    for (k, child) in node {
        let elem = if let Some(f) = k.strip_prefix("f:") {
            PathElem::Field(f.to_string())
        } else if let Some(key) = k.strip_prefix("k:") {
            // Re-serialize so keys written by others compare canonically.
            match serde_json::from_str::<Value>(key) {
                Ok(v) => PathElem::Key(serde_json::to_string(&v).unwrap_or_default()),
                Err(_) => continue,
            }
        } else if let Some(val) = k.strip_prefix("v:") {
            PathElem::Value(val.to_string())
        } else {
            continue;
        };
        prefix.push(elem);
        match child.as_object() {
            Some(m) if !m.is_empty() => {
                if m.contains_key(".") {
                    out.insert(prefix.clone());
                }
                parse_node(m, prefix, out);
            }
            _ => out.insert(prefix.clone()),
        }
        prefix.pop();
    }
}

/// Adds every path of `value`, found at `prefix` under map key `field`.
pub fn paths_of(value: &Value, prefix: &mut FieldPath, field: &str, out: &mut FieldSet) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                prefix.push(PathElem::Field(k.clone()));
                paths_of(v, prefix, k, out);
                prefix.pop();
            }
        }
        Value::Array(items) => match list_kind(field, items, &[]) {
            ListKind::Keyed(key) => {
                for item in items {
                    let Some(k) = item_key(item, key) else {
                        continue;
                    };
                    prefix.push(PathElem::Key(k));
                    out.insert(prefix.clone());
                    if let Some(m) = item.as_object() {
                        for (f, v) in m {
                            prefix.push(PathElem::Field(f.clone()));
                            paths_of(v, prefix, f, out);
                            prefix.pop();
                        }
                    }
                    prefix.pop();
                }
            }
            ListKind::Set => {
                for item in items {
                    prefix.push(PathElem::Value(item.to_string()));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListKind::Atomic => out.insert(prefix.clone()),
        },
        _ => out.insert(prefix.clone()),
    }
}

/// The part of an object whose fields are tracked: everything but
/// `apiVersion`, `kind` and system metadata (name, uid, resourceVersion, ...);
/// of `metadata` only labels, annotations, finalizers and ownerReferences.
pub fn tracked_view(obj: &Value) -> Value {
    let mut out = Map::new();
    if let Some(m) = obj.as_object() {
        for (k, v) in m {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    let mut meta = Map::new();
                    if let Some(mm) = v.as_object() {
                        for key in ["labels", "annotations", "finalizers", "ownerReferences"] {
                            if let Some(x) = mm.get(key) {
                                meta.insert(key.to_string(), x.clone());
                            }
                        }
                    }
                    if !meta.is_empty() {
                        out.insert(k.clone(), Value::Object(meta));
                    }
                }
                _ => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

/// All tracked paths of an object.
pub fn object_paths(obj: &Value) -> FieldSet {
    let mut out = FieldSet::default();
    let view = tracked_view(obj);
    if let Some(m) = view.as_object() {
        for (k, v) in m {
            let mut prefix = vec![PathElem::Field(k.clone())];
            paths_of(v, &mut prefix, k, &mut out);
        }
    }
    out
}

/// The value at `path`, if present.
pub fn get_at<'a>(value: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = value;
    for elem in path {
        cur = match elem {
            PathElem::Field(f) => cur.as_object()?.get(f)?,
            PathElem::Key(k) => find_keyed(cur.as_array()?, k)?,
            PathElem::Value(v) => cur
                .as_array()?
                .iter()
                .find(|i| i.to_string().as_str() == v.as_str())?,
        };
    }
    Some(cur)
}

fn key_matches(item: &Value, key: &str) -> bool {
    let Ok(Value::Object(want)) = serde_json::from_str::<Value>(key) else {
        return false;
    };
    want.iter().all(|(k, v)| item.get(k) == Some(v))
}

fn find_keyed<'a>(items: &'a [Value], key: &str) -> Option<&'a Value> {
    items.iter().find(|i| key_matches(i, key))
}

/// Removes the value at `path` (a map entry, list item or set member).
pub fn remove_at(value: &mut Value, path: &[PathElem]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = value;
    for elem in parent_path {
        let next = match elem {
            PathElem::Field(f) => cur.as_object_mut().and_then(|m| m.get_mut(f)),
            PathElem::Key(k) => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| key_matches(i, k))),
            PathElem::Value(_) => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        PathElem::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        PathElem::Key(k) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| !key_matches(i, k));
            }
        }
        PathElem::Value(v) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| i.to_string().as_str() != v.as_str());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip() {
        let obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "labels": {"a": "1"}, "finalizers": ["f"]},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "c", "image": "i", "args": ["a"]}
            ]}}}
        });
        let set = object_paths(&obj);
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({
                "f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"f\"": {}}},
                "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"c\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {}}
                }}}}
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
    }

    #[test]
    fn get_and_remove_keyed() {
        let mut v = json!({"c": [{"name": "a", "x": 1}, {"name": "b"}], "f": ["p", "q"]});
        let p = vec![
            PathElem::Field("c".into()),
            PathElem::Key(r#"{"name":"a"}"#.into()),
            PathElem::Field("x".into()),
        ];
        assert_eq!(get_at(&v, &p), Some(&json!(1)));
        remove_at(&mut v, &p[..2]);
        assert_eq!(v["c"], json!([{"name": "b"}]));
        remove_at(
            &mut v,
            &[PathElem::Field("f".into()), PathElem::Value("\"p\"".into())],
        );
        assert_eq!(v["f"], json!(["q"]));
    }

    #[test]
    fn covers_descendants() {
        let mut s = FieldSet::default();
        s.insert(vec![
            PathElem::Field("a".into()),
            PathElem::Field("b".into()),
        ]);
        assert!(s.covers(&vec![PathElem::Field("a".into())]));
        assert!(!s.covers(&vec![PathElem::Field("b".into())]));
        s.remove_subtree(&vec![PathElem::Field("a".into())]);
        assert!(s.is_empty());
    }
}
