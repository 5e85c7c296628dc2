//! The CRD's own schema, checked by the operator on what conversion makes.
//!
//! The API server validates an object against the schema of the version it
//! was written in, then converts it for storage, and does not validate the
//! converted object again. Conversion to the storage version brings back
//! fields from the kept-fields annotation, which is user input: without this
//! check a v1alpha1 client could store a v1 field outside the v1
//! schema (a canary of 5000 replicas). So the webhook refuses a conversion to
//! the storage version whose result breaks a bound of that version's schema
//! (a range, a length, an enum, a type), naming the field.
//!
//! Not every object converted is whole: server-side apply converts the
//! fields one manager owns, as a partial object, between versions (the fake
//! API server does; a v1alpha1 apply that owned `autoscaling.minReplicas`
//! but not `maxReplicas` was refused when this check counted required
//! fields). So a missing required field is not a problem here, and neither
//! are the CEL rules, which read fields a partial object lacks and defaults
//! it was never given. Those rules are checked again where the object is
//! whole: the reconcile's `core::validate`, which turns a broken one into
//! `InvalidSpec` (defence in depth, as for every bound).

use std::sync::OnceLock;

use serde_json::Value;

use super::{GROUP, STORAGE_VERSION, crd};

/// The storage version's compiled schema, built once: compiling is the
/// expensive part.
struct Storage {
    validator: jsonschema::Validator,
}

fn storage() -> Result<&'static Storage, String> {
    static STORAGE: OnceLock<Result<Storage, String>> = OnceLock::new();
    STORAGE
        .get_or_init(|| {
            let crd = crd().map_err(|e| format!("the CRD does not merge: {e}"))?;
            let schema = crd
                .spec
                .versions
                .iter()
                .find(|v| v.name == STORAGE_VERSION)
                .and_then(|v| v.schema.as_ref())
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(serde_json::to_value)
                .transpose()
                .map_err(|e| e.to_string())?
                .ok_or("the CRD has no storage schema")?;
            let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
            Ok(Storage { validator })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// At most this many problems are named in one message.
const NAMED: usize = 5;

/// Whether `obj`, in the storage version, keeps within that version's
/// schema (see the module doc for what is not counted); else what breaks
/// it, each with its field.
pub fn check_storage_version(obj: &Value) -> Result<(), String> {
    let expected = format!("{GROUP}/{STORAGE_VERSION}");
    if obj.get("apiVersion").and_then(Value::as_str) != Some(expected.as_str()) {
        return Err(format!("the object is not {expected}"));
    }
    let storage = storage()?;
    let problems: Vec<String> = storage
        .validator
        .iter_errors(obj)
        .filter(|e| {
            !matches!(
                e.kind(),
                jsonschema::error::ValidationErrorKind::Required { .. }
            )
        })
        .take(NAMED)
        .map(|e| format!("{}: {e}", dotted(&e.instance_path().to_string())))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// `/spec/rollout/canary/replicas` → `spec.rollout.canary.replicas`.
fn dotted(pointer: &str) -> String {
    let d = pointer.trim_start_matches('/').replace('/', ".");
    if d.is_empty() { "the object".into() } else { d }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(spec: Value) -> Value {
        json!({"apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "ModelService",
            "metadata": {"name": "m", "namespace": "ml"}, "spec": spec})
    }

    #[test]
    fn a_valid_object_passes() {
        let o = object(json!({"model": {"name": "m"}, "runtime": {"image": "i"}}));
        assert_eq!(check_storage_version(&o), Ok(()));
    }

    #[test]
    fn a_bound_broken_names_the_field() {
        let o = object(json!({"model": {"name": "m"}, "runtime": {"image": "i"},
            "rollout": {"canary": {"replicas": 5000}}}));
        let e = check_storage_version(&o).expect_err("out of bounds");
        assert!(e.contains("spec.rollout.canary.replicas"), "{e}");
    }

    /// What server-side apply converts: the fields one manager owns.
    #[test]
    fn a_partial_object_is_not_refused_for_what_it_lacks() {
        let o = object(json!({"autoscaling": {"minReplicas": 5}}));
        assert_eq!(check_storage_version(&o), Ok(()));
        let o = object(json!({"autoscaling": {"minReplicas": 500}}));
        assert!(check_storage_version(&o).is_err(), "a bound still counts");
    }
}
