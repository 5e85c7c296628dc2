//! Whether a child already has every field we would apply.
//!
//! Server-side apply of an unchanged object is a no-op on the server, but it is
//! still a write request, one per child per resync. Comparing the desired
//! object against the cached one first makes a converged operator send
//! nothing at all. A hand edit of a field we own shows up as a difference, so
//! it is still reverted; fields we do not set (server defaults, other
//! controllers' fields) are ignored.

use serde_json::Value;

/// True when every field present in `desired` has the same value in
/// `observed`. Lists must have the same length and match element-wise.
/// `null` in `desired` means "not set by us" and matches anything.
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Null, _) => true,
        (Value::Object(d), Value::Object(o)) => d
            .iter()
            .all(|(k, dv)| dv.is_null() || o.get(k).is_some_and(|ov| is_subset(dv, ov))),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(dv, ov)| is_subset(dv, ov))
        }
        (Value::Number(d), Value::Number(o)) => d.as_f64() == o.as_f64(),
        (d, o) => d == o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_defaults_do_not_count_as_drift() {
        let desired = json!({"spec": {"ports": [{"port": 80}]}});
        let observed =
            json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}], "clusterIP": "10.0.0.1"}});
        assert!(is_subset(&desired, &observed));
    }

    #[test]
    fn a_changed_owned_field_is_drift() {
        let desired = json!({"spec": {"template": {"spec": {"containers": [{"image": "a:1"}]}}}});
        let observed = json!({"spec": {"template": {"spec": {"containers": [{"image": "a:2"}]}}}});
        assert!(!is_subset(&desired, &observed));
    }

    #[test]
    fn a_missing_field_or_list_item_is_drift() {
        assert!(!is_subset(&json!({"a": {"b": 1}}), &json!({"a": {}})));
        assert!(!is_subset(&json!({"l": [1, 2]}), &json!({"l": [1]})));
        assert!(!is_subset(&json!({"l": [1]}), &json!({"l": [1, 2]})));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(is_subset(&json!({"n": 1}), &json!({"n": 1.0})));
    }
}
