//! A fingerprint of what we last applied, stored on each child.
//!
//! Skipping an apply when the cached child already holds every desired field
//! (see `subset`) misses one case: a field we stopped setting (a removed
//! nodeSelector, `spec.replicas` once an HPA takes over) is still present and
//! still owned by us. Stamping the desired object with a hash of itself makes
//! any change of the desired object, removals included, a difference the
//! subset check sees, so it is applied and server-side apply releases the
//! dropped fields.

use serde_json::Value;

/// The annotation that carries the fingerprint.
pub const ANNOTATION: &str = "modelservice.dev/applied-fingerprint";

/// FNV-1a over the canonical JSON text: stable across processes and releases
/// (unlike `std`'s randomly seeded hasher), and plenty for change detection.
pub fn fingerprint(v: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Adds the fingerprint of `desired` (as it is before stamping) to its
/// `metadata.annotations`.
pub fn stamp(desired: &mut Value) {
    let fp = fingerprint(desired);
    if let Some(meta) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(ANNOTATION.to_string(), Value::String(fp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::subset::is_subset;
    use serde_json::json;

    #[test]
    fn a_removed_field_is_a_difference_the_subset_check_sees() {
        let mut before = json!({"metadata": {"name": "m"}, "spec": {"replicas": 1, "x": 1}});
        let mut after = json!({"metadata": {"name": "m"}, "spec": {"x": 1}});
        stamp(&mut before);
        stamp(&mut after);
        // What the cluster holds after the first apply.
        let observed = before.clone();
        assert!(is_subset(&before, &observed));
        assert!(
            !is_subset(&after, &observed),
            "dropping spec.replicas must trigger an apply"
        );
    }

    #[test]
    fn fingerprints_are_stable_and_distinct() {
        let a = json!({"a": 1, "b": [1, 2]});
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&json!({"a": 1, "b": [2, 1]})));
        assert_eq!(fingerprint(&json!({})).len(), 16);
    }
}
