//! Strategic merge patch, approximated without schemas.
//!
//! Like a JSON merge patch, except lists of objects merge by key (see
//! [`crate::listkeys`]), `finalizers` merge as a set (their real patch
//! strategy), and the `$patch`/`$deleteFromPrimitiveList` directives work.
//! Other `$` directives (`$setElementOrder`, `$retainKeys`) are ignored.

use serde_json::{Map, Value};

use crate::listkeys::{ListKind, item_key, list_kind};

/// Merges `patch` into `doc`.
pub fn merge(doc: &mut Value, patch: &Value) {
    let Some(pm) = patch.as_object() else {
        *doc = patch.clone();
        return;
    };
    if pm.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = patch.clone();
        strip_directives(&mut clean);
        *doc = clean;
        return;
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Some(dm) = doc.as_object_mut() else {
        return;
    };
    for (k, pv) in pm {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(gone)) = (
                dm.get_mut(field).and_then(Value::as_array_mut),
                pv.as_array(),
            ) {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            dm.remove(k);
            continue;
        }
        match dm.get_mut(k) {
            Some(dv) => merge_field(dv, pv, k),
            None => {
                let mut v = pv.clone();
                strip_directives(&mut v);
                dm.insert(k.clone(), v);
            }
        }
    }
}

fn merge_field(dst: &mut Value, src: &Value, field: &str) {
    match (&mut *dst, src) {
        (Value::Object(_), Value::Object(_)) => merge(dst, src),
        (Value::Array(d), Value::Array(s)) => match list_kind(field, d, s) {
            ListKind::Keyed(key) => merge_keyed(d, s, key),
            ListKind::Set => {
                for v in s {
                    if !d.contains(v) {
                        d.push(v.clone());
                    }
                }
            }
            ListKind::Atomic => *dst = src.clone(),
        },
        _ => {
            let mut v = src.clone();
            strip_directives(&mut v);
            *dst = v;
        }
    }
}

fn merge_keyed(dst: &mut Vec<Value>, src: &[Value], key: &str) {
    for item in src {
        let k = item_key(item, key);
        let pos = dst
            .iter()
            .position(|d| k.is_some() && item_key(d, key) == k);
        let directive = item.get("$patch").and_then(Value::as_str);
        match (pos, directive) {
            (Some(i), Some("delete")) => {
                dst.remove(i);
            }
            (None, Some("delete")) => {}
            (Some(i), _) => merge(&mut dst[i], item),
            (None, _) => {
                let mut v = item.clone();
                strip_directives(&mut v);
                dst.push(v);
            }
        }
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_containers_by_name() {
        let mut doc = json!({"spec": {"containers": [
            {"name": "a", "image": "1"}, {"name": "b", "image": "2"}
        ]}, "metadata": {"finalizers": ["x"]}});
        let patch = json!({"spec": {"containers": [
            {"name": "b", "image": "3"}, {"name": "a", "$patch": "delete"}, {"name": "c", "image": "4"}
        ]}, "metadata": {"finalizers": ["y"]}});
        merge(&mut doc, &patch);
        assert_eq!(
            doc["spec"]["containers"],
            json!([{"name": "b", "image": "3"}, {"name": "c", "image": "4"}])
        );
        assert_eq!(doc["metadata"]["finalizers"], json!(["x", "y"]));
        merge(
            &mut doc,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
        );
        assert_eq!(doc["metadata"]["finalizers"], json!(["y"]));
    }
}
