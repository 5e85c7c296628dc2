//! The full desired set of children for one ModelService.
//!
//! Reconcile applies exactly this, and `render` prints exactly this.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{ValidSpec, deployment, hpa, keda, service};
use crate::api::keda::ScaledObject;

/// What should exist for one ModelService. `None` means that child must
/// not exist (it is deleted if it does). One field per row of the child
/// table (`controller::children`); every use destructures it without `..`,
/// so a new child that is not applied or rendered does not compile.
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    pub deployment: Deployment,
    pub service: Service,
    pub hpa: Option<HorizontalPodAutoscaler>,
    pub scaled_object: Option<ScaledObject>,
}

/// Builds every child of `v`, each owned by `owner` when given.
pub fn build_children(v: &ValidSpec, owner: Option<&OwnerReference>) -> Children {
    Children {
        deployment: deployment::build(v, owner),
        service: service::build(v, owner),
        hpa: hpa::build(v, owner),
        scaled_object: keda::build(v, owner),
    }
}

impl Children {
    /// The children as a multi-document YAML stream, in apply order.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let Children {
            deployment,
            service,
            hpa,
            scaled_object,
        } = self;
        let mut docs = vec![
            serde_yaml::to_string(deployment)?,
            serde_yaml::to_string(service)?,
        ];
        if let Some(h) = hpa {
            docs.push(serde_yaml::to_string(h)?);
        }
        if let Some(s) = scaled_object {
            docs.push(serde_yaml::to_string(s)?);
        }
        Ok(docs.iter().map(|d| format!("---\n{d}")).collect::<String>())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::ModelService;

    /// The full example of ../shared/API.md, used across the core's tests.
    pub fn sample() -> ModelService {
        serde_yaml::from_str(
            r#"
apiVersion: serving.modelservice.dev/v1beta1
kind: ModelService
metadata: {name: llama, namespace: ml, uid: 0b7c6a6e-1111-2222-3333-444455556666, generation: 3}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct, version: "2024-07-23"}
  runtime:
    image: vllm/vllm-openai:v0.8.5
    args: ["--max-model-len", "8192"]
    env: [{name: HF_HOME, value: /cache}]
  replicas: 2
  resources: {gpus: 1, cpu: "4", memory: 32Gi}
  scheduling:
    nodeSelector: {gpu: a100}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  autoscaling: {minReplicas: 1, maxReplicas: 8, targetQueueLength: 5}
"#,
        )
        .expect("sample parses")
    }

    pub fn valid() -> ValidSpec {
        crate::core::validate(&sample(), "default").expect("sample is valid")
    }

    #[test]
    fn defaults_fill_in_what_the_document_omits() {
        let ms: ModelService = serde_yaml::from_str(
            "apiVersion: serving.modelservice.dev/v1beta1\nkind: ModelService\nmetadata: {name: m}\nspec: {model: {name: m}, runtime: {image: i}}\n",
        )
        .expect("parses");
        assert_eq!(
            (
                ms.spec.replicas,
                ms.spec.runtime.port,
                ms.spec.resources.gpus,
                ms.spec.resources.gpu_resource.as_str()
            ),
            (1, 8000, 1, "nvidia.com/gpu")
        );
        assert_eq!(
            ms.spec.rollout.strategy,
            crate::api::RolloutStrategy::RollingUpdate
        );
        assert_eq!(ms.spec.runtime.preset, None);
    }

    #[test]
    fn every_child_is_owned_and_labelled() {
        let owner = OwnerReference {
            api_version: "serving.modelservice.dev/v1beta1".into(),
            kind: "ModelService".into(),
            name: "llama".into(),
            uid: "u-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let c = build_children(&valid(), Some(&owner));
        let metas = [
            &c.deployment.metadata,
            &c.service.metadata,
            &c.hpa.as_ref().expect("hpa").metadata,
        ];
        for m in metas {
            assert_eq!(m.name.as_deref(), Some("llama"));
            assert_eq!(m.namespace.as_deref(), Some("ml"));
            assert_eq!(m.owner_references.as_deref(), Some(&[owner.clone()][..]));
            let l = m.labels.as_ref().expect("labels");
            assert_eq!(
                l.get("app.kubernetes.io/name").map(String::as_str),
                Some("modelservice")
            );
            assert_eq!(
                l.get("app.kubernetes.io/instance").map(String::as_str),
                Some("llama")
            );
            assert_eq!(
                l.get("app.kubernetes.io/managed-by").map(String::as_str),
                Some("modelservice-operator")
            );
        }
    }

    #[test]
    fn yaml_documents_carry_api_version_and_kind() {
        let y = build_children(&valid(), None).to_yaml().expect("yaml");
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&y)
            .map(|d| serde::Deserialize::deserialize(d).expect("doc"))
            .collect();
        let kinds: Vec<(&str, &str)> = docs
            .iter()
            .map(|d| {
                (
                    d["apiVersion"].as_str().unwrap_or(""),
                    d["kind"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("apps/v1", "Deployment"),
                ("v1", "Service"),
                ("autoscaling/v2", "HorizontalPodAutoscaler")
            ]
        );
    }

    #[test]
    fn building_is_deterministic() {
        let a = build_children(&valid(), None).to_yaml().expect("yaml");
        let b = build_children(&valid(), None).to_yaml().expect("yaml");
        assert_eq!(a, b);
    }
}
