//! Pods as the GPU ledger decodes them (see `gpu_ledger`): which pod, where
//! it runs and what it asks for, nothing else.
//!
//! The ledger watches the pods of the whole cluster. Decoded as `Pod`, every
//! env var, volume, probe and status of every pod event was allocated, to
//! sum a handful of resource requests per node: at 1,000 ModelServices the
//! paged list this replaced set the operator's peak memory (BENCHMARKS.md).
//! Here the rest of each pod is skipped while decoding.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};

/// A pod with only its name, namespace, resourceVersion, node, phase, containers' resources (and init
/// containers' restart policy) and overhead set.
#[derive(Clone, Debug, Default)]
pub struct UsagePod(pub Pod);

impl Resource for UsagePod {
    type DynamicType = ();
    type Scope = <Pod as Resource>::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[derive(Deserialize, Default)]
struct Wire {
    #[serde(default)]
    metadata: MetaWire,
    #[serde(default)]
    spec: SpecWire,
    #[serde(default)]
    status: StatusWire,
}

/// Which pod, and the resourceVersion a watch resumes from.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MetaWire {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SpecWire {
    node_name: Option<String>,
    #[serde(default)]
    containers: Vec<ContainerWire>,
    #[serde(default)]
    init_containers: Vec<ContainerWire>,
    overhead: Option<BTreeMap<String, Quantity>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ContainerWire {
    resources: Option<ResourceRequirements>,
    restart_policy: Option<String>,
}

#[derive(Deserialize, Default)]
struct StatusWire {
    phase: Option<String>,
}

impl ContainerWire {
    fn slim(self) -> Container {
        Container {
            resources: self.resources,
            restart_policy: self.restart_policy,
            ..Container::default()
        }
    }
}

impl<'de> Deserialize<'de> for UsagePod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::deserialize(d)?;
        let init: Vec<Container> = w
            .spec
            .init_containers
            .into_iter()
            .map(ContainerWire::slim)
            .collect();
        Ok(UsagePod(Pod {
            metadata: ObjectMeta {
                name: w.metadata.name,
                namespace: w.metadata.namespace,
                resource_version: w.metadata.resource_version,
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: w.spec.node_name,
                containers: w
                    .spec
                    .containers
                    .into_iter()
                    .map(ContainerWire::slim)
                    .collect(),
                init_containers: (!init.is_empty()).then_some(init),
                overhead: w.spec.overhead,
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: w.status.phase,
                ..PodStatus::default()
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::surge::pod_request;
    use serde_json::json;

    #[test]
    fn what_a_pod_requests_reads_the_same_from_the_slim_pod() {
        let full = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "annotations": {"a": "x".repeat(500)}},
            "spec": {"nodeName": "gpu-1",
                "containers": [{"name": "server", "image": "vllm", "env": [{"name": "A", "value": "b"}],
                    "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "4"}}}],
                "initContainers": [
                    {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"name": "fetch", "resources": {"requests": {"nvidia.com/gpu": "4"}}}],
                "overhead": {"nvidia.com/gpu": "0"}},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}});
        let typed: Pod = serde_json::from_value(full.clone()).unwrap_or_default();
        let slim: UsagePod = serde_json::from_value(full).unwrap_or_default();
        for resource in ["nvidia.com/gpu", "cpu"] {
            assert_eq!(
                pod_request(&slim.0, resource),
                pod_request(&typed, resource)
            );
        }
        assert_eq!(pod_request(&slim.0, "nvidia.com/gpu"), 5000);
        let spec = slim.0.spec.unwrap_or_default();
        assert_eq!(spec.node_name.as_deref(), Some("gpu-1"));
        assert!(spec.containers[0].env.is_none());
        assert_eq!(
            slim.0.status.and_then(|s| s.phase).as_deref(),
            Some("Running")
        );
    }
}
