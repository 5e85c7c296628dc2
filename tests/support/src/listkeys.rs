//! How lists merge: by a key, as a set, or atomically.
//!
//! The real server knows from OpenAPI schemas that `containers` merge by
//! `name`, `finalizers` are a set, and `args` is replaced whole. The fake has
//! no schemas, so it uses this small rulebook (shared by strategic merge patch
//! and server-side apply so both agree on list identity).

use serde_json::Value;

/// Merge semantics of one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Items are objects identified by this field.
    Keyed(&'static str),
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

/// Decides the kind of the list stored under `field`, looking at the items
/// of both sides of a merge (either side may be empty).
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
        .map(|k| ListKind::Keyed(k))
        .unwrap_or(ListKind::Atomic)
}

/// The identity of a keyed item as canonical JSON (`{"name":"c"}`): the
/// fieldsV1 `k:` element and the matching key between two lists.
pub fn item_key(item: &Value, key: &str) -> Option<String> {
    let v = item.get(key)?;
    let mut m = serde_json::Map::new();
    m.insert(key.to_string(), v.clone());
    serde_json::to_string(&Value::Object(m)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds() {
        let containers = vec![json!({"name": "a", "image": "x"})];
        assert_eq!(
            list_kind("containers", &containers, &[]),
            ListKind::Keyed("name")
        );
        assert_eq!(list_kind("finalizers", &[json!("a")], &[]), ListKind::Set);
        assert_eq!(list_kind("args", &[json!("a")], &[]), ListKind::Atomic);
        let ports = vec![json!({"containerPort": 80})];
        assert_eq!(
            list_kind("ports", &ports, &[]),
            ListKind::Keyed("containerPort")
        );
        assert_eq!(item_key(&containers[0], "name").unwrap(), r#"{"name":"a"}"#);
    }
}
