//! `labelSelector` and `fieldSelector` query parameters.
//!
//! Both lists and watches filter with them; a watch must also turn an object
//! that stops matching into a DELETED event, so matching is a pure function
//! of one object that the watch code can evaluate on old and new states.

mod field;
mod label;

pub use field::FieldSelector;
pub use label::LabelSelector;

use serde_json::Value;

/// The combined filter of a list or watch request.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only objects in this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && crate::meta::namespace(obj) != ns
        {
            return false;
        }
        self.labels.matches(crate::meta::labels(obj)) && self.fields.matches(obj)
    }
}
