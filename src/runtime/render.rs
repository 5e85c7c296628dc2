//! `render -f FILE`: the children of each ModelService in a file, offline,
//! through exactly the convert, validate and build code that the webhook and
//! reconcile run.

use super::manifests::{documents, is_model_service};
use crate::api::ModelService;
use crate::core::convert::{V1, convert_object};
use crate::core::{OperatorDefaults, build_children, validate_with};

/// Renders every ModelService document of `yaml`, in any served version.
/// Documents of other kinds are skipped, so a whole GitOps folder can be
/// piped in.
pub fn render(yaml: &str, default_namespace: &str) -> Result<String, String> {
    render_with(yaml, default_namespace, &OperatorDefaults::default())
}

/// [`render`], with what the operator's flags add (`--prometheus-address`).
pub fn render_with(
    yaml: &str,
    default_namespace: &str,
    defaults: &OperatorDefaults,
) -> Result<String, String> {
    let mut out = String::new();
    let mut found = 0;
    for doc in documents(yaml)? {
        if !is_model_service(&doc.value) {
            continue;
        }
        found += 1;
        let at = doc.position;
        let v1 = convert_object(doc.value, V1).map_err(|e| format!("document {at}: {e}"))?;
        let ms: ModelService = serde_json::from_value(v1)
            .map_err(|e| format!("document {at}: not a valid ModelService: {e}"))?;
        let valid = validate_with(&ms, default_namespace, defaults)
            .map_err(|e| format!("document {at}: {e}"))?;
        let children = build_children(&valid, None);
        out.push_str(&children.to_yaml().map_err(|e| e.to_string())?);
    }
    if found == 0 {
        return Err("no ModelService document found".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: &str = "apiVersion: serving.modelservice.dev/v1\nkind: ModelService\nmetadata: {name: tiny}\nspec: {model: {name: m}, runtime: {image: i}, resources: {gpus: 0}, rollout: {surge: Never}}\n";
    const BETA: &str = "apiVersion: serving.modelservice.dev/v1beta1\nkind: ModelService\nmetadata: {name: tiny}\nspec: {model: {name: m}, runtime: {image: i}, resources: {gpus: 0}, rollout: {surge: Never}}\n";
    const ALPHA: &str = "apiVersion: serving.modelservice.dev/v1alpha1\nkind: ModelService\nmetadata: {name: tiny}\nspec: {model: m, image: i, gpus: 0}\n";

    #[test]
    fn the_canary_sample_renders_both_tracks_and_the_weighted_route() {
        let yaml = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("config/samples/canary-route.yaml"),
        )
        .expect("sample");
        let out = render(&yaml, "ml").expect("renders");
        for want in [
            "name: llama-8b-canary",
            "name: llama-8b-stable",
            "kind: HTTPRoute",
            "serving.modelservice.dev/track: canary",
            "weight: 90",
            "weight: 10",
            "image: vllm/vllm-openai:v0.9.0",
        ] {
            assert!(out.contains(want), "{want} missing from:\n{out}");
        }
    }

    #[test]
    fn the_pool_sample_renders_the_pool_its_picker_and_the_route_to_it() {
        let yaml = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("config/samples/inference-pool.yaml"),
        )
        .expect("sample");
        let out = render(&yaml, "ml").expect("renders");
        for want in [
            "kind: InferencePool",
            "name: llama-8b-pool-epp",
            "kind: Role\n",
            "kind: RoleBinding",
            "kind: ServiceAccount",
            "kind: ConfigMap",
            "failureMode: FailOpen",
            "image: registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0",
            "kind: HTTPRoute",
            "group: inference.networking.k8s.io",
        ] {
            assert!(out.contains(want), "{want} missing from:\n{out}");
        }
        let mine = OperatorDefaults {
            prometheus_address: None,
            endpoint_picker_image: Some("mirror.example/epp:v1".into()),
            fetch_image: None,
        };
        let out = render_with(&yaml, "ml", &mine).expect("renders");
        assert!(out.contains("image: mirror.example/epp:v1"), "{out}");
    }

    #[test]
    fn the_multinode_sample_renders_groups_instead_of_a_deployment() {
        let yaml = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples/multinode.yaml"),
        )
        .expect("sample");
        let out = render(&yaml, "ml").expect("renders");
        for want in [
            "kind: LeaderWorkerSet",
            "size: 2",
            "restartPolicy: RecreateGroupOnPodRestart",
            "- --pipeline-parallel-size",
            "nvidia.com/gpu: '8'",
            "leaderworkerset.sigs.k8s.io/worker-index: '0'",
        ] {
            assert!(out.contains(want), "{want} missing from:\n{out}");
        }
        assert!(!out.contains("kind: Deployment"), "{out}");
    }

    #[test]
    fn renders_deployment_and_service_without_a_cluster() {
        let out = render(MS, "team").expect("renders");
        assert!(out.contains("kind: Deployment") && out.contains("kind: Service"));
        assert!(!out.contains("HorizontalPodAutoscaler"));
        assert!(out.contains("namespace: team"));
        assert!(
            !out.contains("ownerReferences"),
            "no uid offline, so no owner reference"
        );
    }

    #[test]
    fn all_three_versions_render_the_same_children() {
        let v1 = render(MS, "team").expect("renders");
        assert_eq!(render(ALPHA, "team"), Ok(v1.clone()));
        assert_eq!(render(BETA, "team"), Ok(v1));
    }

    #[test]
    fn skips_other_kinds_and_renders_each_modelservice() {
        let two = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\n---\n{MS}---\n{}",
            ALPHA.replace("tiny", "other")
        );
        let out = render(&two, "default").expect("renders");
        assert_eq!(out.matches("kind: Deployment").count(), 2);
    }

    #[test]
    fn invalid_specs_fail_with_the_reason() {
        let bad = MS.replace("gpus: 0", "gpus: 0, gpuResource: gpu");
        let err = render(&bad, "default").expect_err("invalid");
        assert!(err.contains("spec.resources.gpuResource"), "{err}");
        assert!(render("kind: ConfigMap\n", "default").is_err());
    }

    const KEDA: &str = "apiVersion: serving.modelservice.dev/v1beta1\nkind: ModelService\nmetadata: {name: z}\nspec: {model: {name: m}, runtime: {image: i}, autoscaling: {engine: KEDA, minReplicas: 0, maxReplicas: 2}}\n";

    #[test]
    fn keda_renders_a_scaled_object_with_the_operator_default_prometheus() {
        let err = render(KEDA, "ml").expect_err("no Prometheus anywhere");
        assert!(err.contains("--prometheus-address"), "{err}");
        let defaults = OperatorDefaults {
            prometheus_address: Some("http://prom:9090".into()),
            endpoint_picker_image: None,
            fetch_image: None,
        };
        let out = render_with(KEDA, "ml", &defaults).expect("renders");
        assert!(out.contains("kind: ScaledObject"), "{out}");
        assert!(out.contains("serverAddress: http://prom:9090"), "{out}");
        assert!(!out.contains("HorizontalPodAutoscaler"), "{out}");
    }
}
