//! Reading manifest files the way GitOps repositories hold them: a YAML
//! stream of any kinds, of which the ModelServices (in either version) are
//! ours. `render` and `convert` share this so they agree on what they skip.

use serde::Deserialize;
use serde_json::Value;

use crate::api::GROUP;

/// One document of a stream, as JSON, with its 1-based position for errors.
pub struct Document {
    pub position: usize,
    pub value: Value,
}

/// Every non-empty document of `yaml`.
pub fn documents(yaml: &str) -> Result<Vec<Document>, String> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let value = Value::deserialize(doc).map_err(|e| format!("document {}: {e}", i + 1))?;
        if !value.is_null() {
            out.push(Document {
                position: i + 1,
                value,
            });
        }
    }
    Ok(out)
}

/// Whether a document is a ModelService of this operator's group, in any version.
pub fn is_model_service(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str) == Some("ModelService")
        && v.get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|a| a.split_once('/'))
            .is_some_and(|(group, _)| group == GROUP)
}

/// Reads a manifest file, or standard input for `-`.
pub fn read(path: &std::path::Path) -> Result<String, String> {
    let input = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    input.map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_documents_are_skipped_and_positions_kept() {
        let docs = documents("---\n---\nkind: A\n---\nkind: ModelService\napiVersion: serving.modelservice.dev/v1alpha1\n")
            .expect("parses");
        assert_eq!(docs.iter().map(|d| d.position).collect::<Vec<_>>(), [2, 3]);
        assert!(!is_model_service(&docs[0].value));
        assert!(is_model_service(&docs[1].value));
    }

    #[test]
    fn a_model_service_of_another_group_is_not_ours() {
        let v = serde_json::json!({"kind": "ModelService", "apiVersion": "llm-d.ai/v1alpha1"});
        assert!(!is_model_service(&v));
    }
}
