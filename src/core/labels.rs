//! Labels, selector and owner reference shared by every child.
//!
//! The selector is deliberately only name + instance: a Deployment's selector
//! is immutable, so anything that may change (model version) stays out of it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::ValidSpec;

pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MODEL_VERSION_LABEL: &str = "modelservice.dev/model-version";
pub const APP_NAME: &str = "modelservice";
/// The `app.kubernetes.io/managed-by` value of everything the operator makes;
/// its watches select on it.
pub const MANAGED_BY: &str = "modelservice-operator";

/// Labels that select the pods of one ModelService.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (INSTANCE_LABEL.to_string(), name.to_string()),
        (NAME_LABEL.to_string(), APP_NAME.to_string()),
    ])
}

/// The selector in the string form that status and the scale subresource use.
pub fn selector_string(name: &str) -> String {
    selector_labels(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Labels every child carries.
pub fn common_labels(name: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(name);
    l.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
    l
}

/// Labels of the pods: the common ones plus the model version when set (a
/// valid label value only: anything else is left out rather than failing).
pub fn pod_labels(v: &ValidSpec) -> BTreeMap<String, String> {
    let mut l = common_labels(&v.name);
    if let Some(ver) = v
        .spec
        .model
        .version
        .as_deref()
        .filter(|s| is_label_value(s))
    {
        l.insert(MODEL_VERSION_LABEL.to_string(), ver.to_string());
    }
    l
}

fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    !s.is_empty()
        && s.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Metadata of a child: same name and namespace as the ModelService, common
/// labels, and the controller owner reference when there is one (`render`
/// works on documents that have no uid yet).
pub fn child_meta(v: &ValidSpec, owner: Option<&OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(v.name.clone()),
        namespace: Some(v.namespace.clone()),
        labels: Some(common_labels(&v.name)),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_string_is_sorted_and_stable() {
        assert_eq!(
            selector_string("llama-8b"),
            "app.kubernetes.io/instance=llama-8b,app.kubernetes.io/name=modelservice"
        );
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("2024-07-23"));
        assert!(!is_label_value("2024/07/23"));
        assert!(!is_label_value(""));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
