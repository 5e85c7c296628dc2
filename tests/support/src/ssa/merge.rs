//! Merging an applied configuration into the live object.
//!
//! Maps merge recursively, keyed lists merge item by item, set lists take the
//! union, everything else is replaced: the structural merge of server-side
//! apply, with list identity decided by [`crate::listkeys`].

use serde_json::Value;

use crate::listkeys::{ListKind, item_key, list_kind};

/// Merges `src` into `dst` (both maps); `null` in `src` deletes the field.
pub fn merge_map(dst: &mut Value, src: &Value) {
    let Some(sm) = src.as_object() else {
        return;
    };
    if !dst.is_object() {
        *dst = Value::Object(Default::default());
    }
    let Some(dm) = dst.as_object_mut() else {
        return;
    };
    for (k, sv) in sm {
        if sv.is_null() {
            dm.remove(k);
            continue;
        }
        match dm.get_mut(k) {
            Some(dv) => merge_value(dv, sv, k),
            None => {
                dm.insert(k.clone(), sv.clone());
            }
        }
    }
}

fn merge_value(dst: &mut Value, src: &Value, field: &str) {
    match (&mut *dst, src) {
        (Value::Object(_), Value::Object(_)) => merge_map(dst, src),
        (Value::Array(d), Value::Array(s)) => match list_kind(field, d, s) {
            ListKind::Keyed(key) => {
                for item in s {
                    let k = item_key(item, key);
                    match d.iter_mut().find(|i| k.is_some() && item_key(i, key) == k) {
                        Some(existing) => merge_map(existing, item),
                        None => d.push(item.clone()),
                    }
                }
            }
            ListKind::Set => {
                for item in s {
                    if !d.contains(item) {
                        d.push(item.clone());
                    }
                }
            }
            ListKind::Atomic => *dst = src.clone(),
        },
        _ => *dst = src.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_by_key_and_replaces_atomics() {
        let mut live = json!({"spec": {"containers": [
            {"name": "a", "image": "1", "resources": {"limits": {"cpu": "1"}}},
            {"name": "side", "image": "s"}
        ], "args": ["x", "y"]}});
        let cfg = json!({"spec": {"containers": [{"name": "a", "image": "2"}], "args": ["z"]}});
        merge_map(&mut live, &cfg);
        assert_eq!(live["spec"]["containers"][0]["image"], "2");
        assert_eq!(
            live["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "1"
        );
        assert_eq!(live["spec"]["containers"][1]["name"], "side");
        assert_eq!(live["spec"]["args"], json!(["z"]));
    }
}
