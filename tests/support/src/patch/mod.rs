//! The non-apply patch formats: JSON merge, strategic merge, JSON patch.

mod json;
mod strategic;

use serde_json::Value;

use crate::status::ApiError;

/// Content types the real server accepts for PATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

/// What the real server lists in its 415 for custom resources (no SMP).
pub const CUSTOM_ACCEPTED: &str =
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";
/// What it lists for built-in types.
pub const BUILTIN_ACCEPTED: &str = "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml";

impl PatchType {
    /// Maps a Content-Type header (parameters ignored).
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// Applies a merge, strategic or JSON patch to `doc`.
pub fn apply_patch(kind: PatchType, doc: &mut Value, body: &[u8]) -> Result<(), ApiError> {
    match kind {
        PatchType::Merge => {
            let p = parse_json(body)?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: merge patch must be a JSON object",
                ));
            }
            json_patch::merge(doc, &p);
            Ok(())
        }
        PatchType::Strategic => {
            let p = parse_json(body)?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: strategic merge patch must be a JSON object",
                ));
            }
            strategic::merge(doc, &p);
            Ok(())
        }
        PatchType::Json => json::apply(doc, body),
        PatchType::Apply => Err(ApiError::bad_request("apply is not a plain patch")),
    }
}
