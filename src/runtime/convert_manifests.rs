//! `convert -f FILE --to VERSION`: rewrites the ModelServices of a manifest
//! stream in another API version, through the same code as the webhook, so a
//! Git repository can move to v1 without a cluster. Other documents are
//! written back as they were read.

use super::cli::TargetVersion;
use super::manifests::{documents, is_model_service};
use crate::core::convert::{V1, V1ALPHA1, V1BETA1, convert_object};

/// The converted stream. Comments and key order are not kept: YAML
/// libraries do not carry them through a parse.
pub fn convert(yaml: &str, to: TargetVersion) -> Result<String, String> {
    let target = match to {
        TargetVersion::V1 => V1,
        TargetVersion::V1beta1 => V1BETA1,
        TargetVersion::V1alpha1 => V1ALPHA1,
    };
    let mut out = String::new();
    for doc in documents(yaml)? {
        let at = doc.position;
        let value = if is_model_service(&doc.value) {
            convert_object(doc.value, target).map_err(|e| format!("document {at}: {e}"))?
        } else {
            doc.value
        };
        let text = serde_yaml::to_string(&value).map_err(|e| format!("document {at}: {e}"))?;
        out.push_str("---\n");
        out.push_str(&text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALPHA: &str = "apiVersion: serving.modelservice.dev/v1alpha1\nkind: ModelService\nmetadata: {name: m}\nspec: {model: llama, image: vllm:1, gpus: 2}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v}\n";

    /// The documents of a stream, parsed.
    fn values(s: &str) -> Vec<serde_json::Value> {
        documents(s)
            .expect("parses")
            .into_iter()
            .map(|d| d.value)
            .collect()
    }

    #[test]
    fn model_services_move_and_other_kinds_stay() {
        let out = convert(ALPHA, TargetVersion::V1beta1).expect("converts");
        let docs = documents(&out).expect("parses");
        assert_eq!(docs.len(), 2);
        assert_eq!(
            docs[0].value,
            serde_json::json!({"apiVersion": V1BETA1, "kind": "ModelService", "metadata": {"name": "m"},
                "spec": {"model": {"name": "llama"}, "runtime": {"image": "vllm:1"}, "resources": {"gpus": 2},
                    "rollout": {"surge": "Never"}}})
        );
        assert_eq!(docs[1].value["data"]["k"], "v");
    }

    #[test]
    fn converting_back_gives_the_original_documents() {
        let beta = convert(ALPHA, TargetVersion::V1beta1).expect("converts");
        let back = convert(&beta, TargetVersion::V1alpha1).expect("converts");
        assert_eq!(values(&back), values(ALPHA));
    }

    #[test]
    fn every_version_is_a_target_and_the_hops_come_back() {
        let v1 = convert(ALPHA, TargetVersion::V1).expect("converts");
        assert_eq!(documents(&v1).expect("parses")[0].value["apiVersion"], V1);
        let beta = convert(&v1, TargetVersion::V1beta1).expect("converts");
        assert_eq!(
            documents(&beta).expect("parses")[0].value["apiVersion"],
            V1BETA1
        );
        let back = convert(&beta, TargetVersion::V1alpha1).expect("converts");
        assert_eq!(values(&back), values(ALPHA));
    }

    #[test]
    fn bad_yaml_names_the_document() {
        let err = convert("kind: A\n---\n: :\n  - [", TargetVersion::V1beta1).expect_err("bad");
        assert!(err.contains("document 2"), "{err}");
    }
}
