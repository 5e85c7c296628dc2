//! How lists merge: by a key, as a set, or atomically.
//!
//! The real server knows from OpenAPI schemas that `containers` merge by
//! `name`, `finalizers` are a set, and `args` is replaced whole. The fake has
//! no schemas of built-in types, so it uses this small rulebook (shared by
//! strategic merge patch and server-side apply so both agree on list
//! identity). A custom resource whose CRD is stored follows the CRD's
//! schema instead (`x-kubernetes-list-type`, atomic when absent), during a
//! [`SchemaScope`].

use std::cell::RefCell;

use serde_json::Value;

use crate::schema::Schemas;
use crate::ssa::fieldset::PathElem;

thread_local! {
    /// The schemas of the custom resource being written on this thread. The
    /// field-set code runs synchronously under the store lock, so a scope
    /// around it reaches every list decision without threading the schema
    /// through each path function.
    static SCHEMAS: RefCell<Option<Schemas>> = const { RefCell::new(None) };
}

/// While alive, server-side apply and ownership tracking on this thread
/// decide list identity from `schemas` (outside `metadata`).
pub struct SchemaScope(Option<Schemas>);

impl SchemaScope {
    pub fn enter(schemas: Option<Schemas>) -> SchemaScope {
        SchemaScope(SCHEMAS.with(|c| c.replace(schemas)))
    }
}

impl Drop for SchemaScope {
    fn drop(&mut self) {
        let prev = self.0.take();
        SCHEMAS.with(|c| *c.borrow_mut() = prev);
    }
}

/// Merge semantics of one list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Items are objects identified by these fields (`x-kubernetes-list-map-keys`).
    Keyed(Vec<String>),
    /// Items are scalars; order does not matter, duplicates collapse.
    Set,
    /// The list is one value, replaced as a whole.
    Atomic,
}

fn all_have(items: &[&Value], key: &str) -> bool {
    items
        .iter()
        .all(|i| i.get(key).is_some_and(|k| k.is_string() || k.is_number()))
}

/// Decides the kind of the list at `path` (ending in map key `field`): from
/// the schema in scope, or else as [`list_kind`] does. Metadata follows the
/// rulebook either way, being ObjectMeta in every type; a path the schema
/// does not describe (under `x-kubernetes-preserve-unknown-fields`) is
/// atomic, as a real server treats lists of unknown shape.
pub fn list_kind_at(path: &[PathElem], field: &str, a: &[Value], b: &[Value]) -> ListKind {
    let from_schema = SCHEMAS.with(|c| {
        let schemas = c.borrow();
        let schemas = schemas.as_ref()?;
        if matches!(path.first(), Some(PathElem::Field(f)) if f == "metadata") {
            return None;
        }
        Some(schemas.node_at(path).map_or(ListKind::Atomic, schema_kind))
    });
    from_schema.unwrap_or_else(|| list_kind(field, a, b))
}

fn schema_kind(node: &Value) -> ListKind {
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListKind::Set,
        Some("map") => {
            let keys: Vec<String> = node
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|ks| {
                    ks.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if keys.is_empty() {
                ListKind::Atomic
            } else {
                ListKind::Keyed(keys)
            }
        }
        _ => ListKind::Atomic,
    }
}

/// Decides the kind of the list stored under `field` by the rulebook,
/// looking at the items of both sides of a merge (either side may be empty).
pub fn list_kind(field: &str, a: &[Value], b: &[Value]) -> ListKind {
    let items: Vec<&Value> = a.iter().chain(b.iter()).collect();
    if items.is_empty() {
        return ListKind::Atomic;
    }
    if field == "finalizers" && items.iter().all(|i| i.is_string()) {
        return ListKind::Set;
    }
    let candidates: &[&'static str] = match field {
        "ownerReferences" => &["uid"],
        "volumeMounts" => &["mountPath"],
        "conditions" => &["type"],
        "ports" => &["containerPort", "port", "name"],
        "imagePullSecrets" | "hostAliases" => &["name", "ip"],
        _ => &["name"],
    };
    candidates
        .iter()
        .find(|k| all_have(&items, k))
        .map(|k| ListKind::Keyed(vec![k.to_string()]))
        .unwrap_or(ListKind::Atomic)
}

/// The identity of a keyed item as canonical JSON (`{"name":"c"}`, keys
/// sorted): the fieldsV1 `k:` element and the matching key between two
/// lists. None when the item lacks a key.
pub fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut m = serde_json::Map::new();
    for key in keys {
        m.insert(key.clone(), item.get(key)?.clone());
    }
    serde_json::to_string(&Value::Object(m)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_in_scope_decides_outside_metadata() {
        let schemas = Schemas::from_versions(vec![(
            "g/v1".into(),
            json!({"properties": {
                "spec": {"properties": {
                    "env": {"type": "array", "items": {"type": "object"}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set"},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port", "protocol"]}
                }},
                "x": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}),
        )]);
        let env = vec![json!({"name": "A"})];
        let at = |p: &[&str]| -> Vec<PathElem> {
            p.iter().map(|f| PathElem::Field(f.to_string())).collect()
        };
        let _scope = SchemaScope::enter(Some(schemas));
        assert_eq!(
            list_kind_at(&at(&["spec", "env"]), "env", &env, &[]),
            ListKind::Atomic
        );
        assert_eq!(
            list_kind_at(&at(&["spec", "tags"]), "tags", &[json!("a")], &[]),
            ListKind::Set
        );
        assert_eq!(
            list_kind_at(&at(&["spec", "ports"]), "ports", &[], &[]),
            ListKind::Keyed(vec!["port".into(), "protocol".into()])
        );
        assert_eq!(
            list_kind_at(&at(&["x", "containers"]), "containers", &env, &[]),
            ListKind::Atomic,
            "unknown fields' lists are atomic"
        );
        assert_eq!(
            list_kind_at(
                &at(&["metadata", "finalizers"]),
                "finalizers",
                &[json!("f")],
                &[]
            ),
            ListKind::Set
        );
        let item = json!({"protocol": "TCP", "port": 80});
        assert_eq!(
            item_key(&item, &["port".into(), "protocol".into()]).expect("has both"),
            r#"{"port":80,"protocol":"TCP"}"#
        );
    }

    #[test]
    fn kinds() {
        let containers = vec![json!({"name": "a", "image": "x"})];
        assert_eq!(
            list_kind("containers", &containers, &[]),
            ListKind::Keyed(vec!["name".into()])
        );
        assert_eq!(list_kind("finalizers", &[json!("a")], &[]), ListKind::Set);
        assert_eq!(list_kind("args", &[json!("a")], &[]), ListKind::Atomic);
        let ports = vec![json!({"containerPort": 80})];
        assert_eq!(
            list_kind("ports", &ports, &[]),
            ListKind::Keyed(vec!["containerPort".into()])
        );
        assert_eq!(
            item_key(&containers[0], &["name".into()]).expect("has a name"),
            r#"{"name":"a"}"#
        );
    }
}
