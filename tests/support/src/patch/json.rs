//! RFC 6902 JSON patch with the real server's semantics.
//!
//! The API server uses evanphx/json-patch, whose `test` differs from the RFC
//! in one way controllers rely on: testing a *missing* key against `null`
//! succeeds (kube-runtime's finalizer helper sends exactly that). Other
//! operations are delegated to the `json-patch` crate one at a time.

use json_patch::{Patch, PatchOperation};
use serde_json::Value;

use crate::status::ApiError;

fn test_op(doc: &Value, path: &str, expected: &Value) -> Result<(), String> {
    let failed = || format!("testing value {path} failed: test failed");
    match doc.pointer(path) {
        Some(actual) if actual == expected => Ok(()),
        Some(_) => Err(failed()),
        None => {
            // Missing value: OK against null if the parent exists.
            let parent = path.rfind('/').map(|i| &path[..i]).unwrap_or("");
            match doc.pointer(parent) {
                Some(_) if expected.is_null() => Ok(()),
                Some(_) => Err(failed()),
                None => Err(format!(
                    "test operation does not apply: is missing path: {path}"
                )),
            }
        }
    }
}

/// Applies the patch in `body` to `doc`; on any failed operation `doc` may
/// be partly patched, so callers patch a copy.
pub fn apply(doc: &mut Value, body: &[u8]) -> Result<(), ApiError> {
    let patch: Patch = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    for op in patch.0 {
        match &op {
            PatchOperation::Test(t) => {
                test_op(doc, t.path.as_str(), &t.value)
                    .map_err(|e| ApiError::patch_unprocessable(&e))?;
            }
            _ => {
                json_patch::patch(doc, std::slice::from_ref(&op))
                    .map_err(|e| ApiError::patch_unprocessable(&e.to_string()))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_against_null_on_missing_key_passes() {
        let mut doc = json!({"metadata": {"name": "x"}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers","value":null},
                        {"op":"add","path":"/metadata/finalizers","value":["f"]}]"#;
        apply(&mut doc, body).unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["f"]));
    }

    #[test]
    fn failed_test_is_422() {
        let mut doc = json!({"metadata": {"finalizers": ["a"]}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers/0","value":"b"},
                        {"op":"remove","path":"/metadata/finalizers/0"}]"#;
        let err = apply(&mut doc, body).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(err.reason, "Invalid");
    }
}
