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
/// The text is hashed as it is written, never held in memory.
pub fn fingerprint(v: &Value) -> String {
    let mut h = Fnv1a(0xcbf2_9ce4_8422_2325);
    // Writing into a hasher cannot fail; a Value always serializes.
    let _ = serde_json::to_writer(&mut h, v);
    format!("{:016x}", h.0)
}

/// 64-bit FNV-1a as an `io::Write` sink.
struct Fnv1a(u64);

impl std::io::Write for Fnv1a {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for b in buf {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The owner apiVersion every release before v1beta1 wrote on its children.
const FIRST_OWNER_API_VERSION: &str = "serving.modelservice.dev/v1alpha1";

/// Adds the fingerprint of `desired` (as it is before stamping) to its
/// `metadata.annotations`.
///
/// The owner reference is hashed as a v1alpha1 owner, whatever version it
/// names. Which version of the ModelService owns a child is not a change of
/// the child, and a new fingerprint would be: a changed annotation bumps a
/// Deployment's `metadata.generation`, so an operator upgrade would touch
/// every Deployment. This way the upgrade only moves the owner reference to
/// the new version (metadata the Deployment controller ignores), and the
/// fingerprints already on children stay valid.
pub fn stamp(desired: &mut Value) {
    let owners = desired.pointer_mut("/metadata/ownerReferences");
    let written = owners.map(|o| {
        let mut hashed = o.clone();
        for v in hashed
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter_map(|o| o.get_mut("apiVersion"))
            .filter(|v| {
                v.as_str()
                    .is_some_and(|a| a.starts_with("serving.modelservice.dev/"))
            })
        {
            *v = Value::from(FIRST_OWNER_API_VERSION);
        }
        std::mem::replace(o, hashed)
    });
    let fp = fingerprint(desired);
    if let (Some(o), Some(written)) = (desired.pointer_mut("/metadata/ownerReferences"), written) {
        *o = written;
    }
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
    fn the_owners_version_is_not_part_of_the_fingerprint_but_stays_in_the_object() {
        let child = |v: &str| {
            json!({"metadata": {"name": "m", "ownerReferences": [{"apiVersion": v,
                "kind": "ModelService", "name": "m", "uid": "u"}]}, "spec": {"x": 1}})
        };
        let (mut alpha, mut beta) = (
            child("serving.modelservice.dev/v1alpha1"),
            child("serving.modelservice.dev/v1beta1"),
        );
        stamp(&mut alpha);
        stamp(&mut beta);
        assert_eq!(
            alpha["metadata"]["annotations"][ANNOTATION],
            beta["metadata"]["annotations"][ANNOTATION],
            "an upgrade must not re-stamp children"
        );
        assert_eq!(
            beta["metadata"]["ownerReferences"][0]["apiVersion"],
            "serving.modelservice.dev/v1beta1"
        );
        let mut other = child("serving.modelservice.dev/v1beta1");
        other["spec"]["x"] = json!(2);
        stamp(&mut other);
        assert_ne!(
            other["metadata"]["annotations"][ANNOTATION],
            beta["metadata"]["annotations"][ANNOTATION]
        );
    }

    #[test]
    fn fingerprints_are_stable_and_distinct() {
        let a = json!({"a": 1, "b": [1, 2]});
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&json!({"a": 1, "b": [2, 1]})));
        assert_eq!(fingerprint(&json!({})).len(), 16);
        // The same value as before streaming: children stamped by an older
        // release are not re-applied after an upgrade.
        assert_eq!(fingerprint(&json!({"a": 1})), "9c3e82dd6fcae8b1");
    }
}
