//! Field ownership (`managedFields`) and server-side apply.

pub mod apply;
pub mod diff;
pub mod fieldset;
pub mod managed;
pub mod merge;
pub mod track;

use serde_json::Value;

use crate::status::ApiError;

/// Other served versions' views of an object. A `managedFields` entry's
/// paths are in the version its manager wrote with, so a real server
/// compares an object at that version (converting it) before it decides
/// what that manager owns, loses or conflicts on; this is how the fake gets
/// those views.
pub trait Views {
    /// Whether objects of the type can be converted to `api_version`.
    /// Entries of versions that cannot (any entry of a single-version type,
    /// or one of a version the type no longer has) are compared path by
    /// path, as if at the request's version.
    fn converts_to(&self, api_version: &str) -> bool;

    /// `obj` converted to `api_version`.
    fn view(&self, obj: &Value, api_version: &str) -> Result<Value, ApiError>;
}

/// For unit tests of one version: every entry is at the request's version.
#[cfg(test)]
pub struct OneVersion;

#[cfg(test)]
impl Views for OneVersion {
    fn converts_to(&self, _api_version: &str) -> bool {
        false
    }

    fn view(&self, obj: &Value, _api_version: &str) -> Result<Value, ApiError> {
        Ok(obj.clone())
    }
}
