//! The desired Deployment: the pods that serve the model.
//!
//! GPU-specific choices live here: no surge pods (they need GPUs that are
//! rarely free; `surge` lifts this for a rollout when a node has room), a
//! startup probe that allows half an hour of model loading, a
//! progress deadline to match, and no `spec.replicas` while an HPA owns it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::labels::{child_meta, pod_labels, selector_labels};
use super::{ValidSpec, preset, weights};
use crate::api::RolloutStrategy;

/// The name of the serving container.
pub const CONTAINER_NAME: &str = "server";
/// The name of the container port and of the Service port.
pub const PORT_NAME: &str = "http";
/// The HTTP path the serving runtime answers health checks on (vLLM, TGI and
/// NIM all serve it).
pub const HEALTH_PATH: &str = "/health";
/// How long a pod may take to load its model before it is restarted: 180
/// checks 10 s apart, 30 minutes, enough for a 70B model from a cold cache.
pub const STARTUP_FAILURE_THRESHOLD: i32 = 180;
pub const STARTUP_PERIOD_SECONDS: i32 = 10;
/// A rollout that makes no progress for this long is reported as stuck; it
/// matches the startup budget so a slow load is not mistaken for a failure.
pub const PROGRESS_DEADLINE_SECONDS: i32 = 1800;

/// Builds the Deployment for `v`.
pub fn build(v: &ValidSpec, owner: Option<&OwnerReference>) -> Deployment {
    let spec = &v.spec;
    Deployment {
        metadata: child_meta(v, owner),
        spec: DeploymentSpec {
            // The HPA owns the count when autoscaling is on; writing it would fight.
            replicas: spec.autoscaling.is_none().then_some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(&v.name)),
                ..LabelSelector::default()
            },
            strategy: Some(strategy(spec.rollout.strategy)),
            progress_deadline_seconds: Some(PROGRESS_DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(v)),
                    annotations: v.served.as_ref().map(|s| {
                        BTreeMap::from([(weights::SERVED_ANNOTATION.to_string(), s.uri.clone())])
                    }),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(v)),
            },
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

fn strategy(s: RolloutStrategy) -> DeploymentStrategy {
    match s {
        RolloutStrategy::RollingUpdate => DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(IntOrString::Int(0)),
                max_unavailable: Some(IntOrString::Int(1)),
            }),
        },
        RolloutStrategy::Recreate => DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        },
    }
}

fn pod_spec(v: &ValidSpec) -> PodSpec {
    let spec = &v.spec;
    // Tensor-parallel runtimes exchange data through /dev/shm, which is 64 MiB
    // by default: give multi-GPU pods a memory-backed one.
    let shm = spec.resources.gpus > 1;
    PodSpec {
        containers: vec![container(v, shm)],
        node_selector: (!spec.scheduling.node_selector.is_empty())
            .then(|| spec.scheduling.node_selector.clone()),
        tolerations: (!spec.scheduling.tolerations.is_empty())
            .then(|| spec.scheduling.tolerations.clone()),
        volumes: {
            let mut volumes: Vec<Volume> = v.served.iter().map(|s| weights::mount(s).0).collect();
            if shm {
                volumes.push(Volume {
                    name: "dshm".into(),
                    empty_dir: Some(EmptyDirVolumeSource {
                        medium: Some("Memory".into()),
                        ..EmptyDirVolumeSource::default()
                    }),
                    ..Volume::default()
                });
            }
            (!volumes.is_empty()).then_some(volumes)
        },
        ..PodSpec::default()
    }
}

fn container(v: &ValidSpec, shm: bool) -> Container {
    let rt = &v.spec.runtime;
    let model = &v.spec.model.name;
    let path = v.served.as_ref().map(|s| s.path.as_str());
    let mut args = preset::args(
        rt.preset,
        model,
        path,
        rt.port,
        &rt.args,
        super::pool::wanted(v),
    );
    args.extend(rt.args.iter().cloned());
    let mut env = preset::env(rt.preset, model, path, rt.port);
    env.extend(rt.env.iter().cloned());
    Container {
        name: CONTAINER_NAME.into(),
        image: Some(rt.image.clone()),
        // `none` with no args: no empty list, which the server would drop.
        args: (!args.is_empty()).then_some(args),
        env: (!env.is_empty()).then_some(env),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: rt.port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        resources: resources(v),
        startup_probe: Some(probe(STARTUP_PERIOD_SECONDS, STARTUP_FAILURE_THRESHOLD)),
        readiness_probe: Some(probe(5, 3)),
        liveness_probe: Some(probe(10, 3)),
        volume_mounts: {
            let mut mounts: Vec<VolumeMount> =
                v.served.iter().map(|s| weights::mount(s).1).collect();
            if shm {
                mounts.push(VolumeMount {
                    name: "dshm".into(),
                    mount_path: "/dev/shm".into(),
                    ..VolumeMount::default()
                });
            }
            (!mounts.is_empty()).then_some(mounts)
        },
        ..Container::default()
    }
}

fn probe(period_seconds: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(HEALTH_PATH.into()),
            port: IntOrString::String(PORT_NAME.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        failure_threshold: Some(failure_threshold),
        timeout_seconds: Some(5),
        ..Probe::default()
    }
}

fn resources(v: &ValidSpec) -> Option<ResourceRequirements> {
    let r = &v.spec.resources;
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if let Some(cpu) = &r.cpu {
        requests.insert("cpu".to_string(), cpu.clone());
    }
    if let Some(mem) = &r.memory {
        requests.insert("memory".to_string(), mem.clone());
        limits.insert("memory".to_string(), mem.clone());
    }
    if r.gpus > 0 {
        // Extended resources cannot be overcommitted: the limit is also the request.
        limits.insert(r.gpu_resource.clone(), Quantity(r.gpus.to_string()));
    }
    if requests.is_empty() && limits.is_empty() {
        return None;
    }
    Some(ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::children::tests::valid;

    fn first_container(d: &Deployment) -> &Container {
        &d.spec.template.spec.as_ref().expect("pod").containers[0]
    }

    #[test]
    fn gpu_limit_is_set_under_the_configured_resource() {
        let mut v = valid();
        v.spec.resources.gpus = 2;
        v.spec.resources.gpu_resource = "amd.com/gpu".into();
        let d = build(&v, None);
        let limits = first_container(&d)
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits");
        assert_eq!(limits.get("amd.com/gpu"), Some(&Quantity("2".into())));
        assert!(!limits.contains_key("nvidia.com/gpu"));
    }

    #[test]
    fn zero_gpus_means_no_gpu_limit() {
        let mut v = valid();
        v.spec.resources.gpus = 0;
        v.spec.resources.cpu = None;
        v.spec.resources.memory = None;
        let d = build(&v, None);
        assert_eq!(first_container(&d).resources, None);
        let pod = d.spec.template.spec.as_ref().expect("pod");
        assert!(pod.volumes.is_none(), "no shm volume without GPUs");
    }

    #[test]
    fn memory_is_request_and_limit_cpu_only_request() {
        let d = build(&valid(), None);
        let r = first_container(&d).resources.clone().expect("resources");
        let requests = r.requests.expect("requests");
        let limits = r.limits.expect("limits");
        assert_eq!(requests.get("cpu"), Some(&Quantity("4".into())));
        assert_eq!(requests.get("memory"), Some(&Quantity("32Gi".into())));
        assert_eq!(limits.get("memory"), Some(&Quantity("32Gi".into())));
        assert!(
            !limits.contains_key("cpu"),
            "no CPU limit: throttling slows token generation"
        );
    }

    #[test]
    fn replicas_are_set_without_autoscaling() {
        let mut v = valid();
        v.spec.autoscaling = None;
        v.spec.replicas = 3;
        assert_eq!(build(&v, None).spec.replicas, Some(3));
    }

    #[test]
    fn replicas_are_left_to_the_hpa_with_autoscaling() {
        let v = valid();
        assert!(v.spec.autoscaling.is_some());
        let d = build(&v, None);
        assert_eq!(d.spec.replicas, None);
        let json = serde_json::to_value(&d).expect("json");
        assert!(
            json["spec"].get("replicas").is_none(),
            "the applied body must not carry replicas"
        );
    }

    #[test]
    fn rolling_update_never_surges() {
        let mut v = valid();
        v.spec.rollout.strategy = RolloutStrategy::RollingUpdate;
        let s = build(&v, None).spec.strategy.expect("strategy");
        assert_eq!(s.type_.as_deref(), Some("RollingUpdate"));
        let ru = s.rolling_update.expect("rollingUpdate");
        assert_eq!(ru.max_surge, Some(IntOrString::Int(0)));
        assert_eq!(ru.max_unavailable, Some(IntOrString::Int(1)));
    }

    #[test]
    fn recreate_has_no_rolling_parameters() {
        let mut v = valid();
        v.spec.rollout.strategy = RolloutStrategy::Recreate;
        let s = build(&v, None).spec.strategy.expect("strategy");
        assert_eq!(s.type_.as_deref(), Some("Recreate"));
        assert!(
            s.rolling_update.is_none(),
            "the API server rejects rollingUpdate with Recreate"
        );
    }

    #[test]
    fn container_runs_the_model_on_the_port() {
        let d = build(&valid(), None);
        let c = first_container(&d);
        assert_eq!(c.name, "server");
        assert_eq!(c.image.as_deref(), Some("vllm/vllm-openai:v0.8.5"));
        assert_eq!(
            c.args.clone().expect("args"),
            [
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--port",
                "8000",
                "--max-model-len",
                "8192"
            ]
        );
        let port = &c.ports.as_ref().expect("ports")[0];
        assert_eq!(
            (port.name.as_deref(), port.container_port),
            (Some("http"), 8000)
        );
        assert_eq!(c.env.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn startup_probe_allows_minutes_of_model_loading() {
        let d = build(&valid(), None);
        let p = first_container(&d)
            .startup_probe
            .clone()
            .expect("startup probe");
        let budget = p.period_seconds.unwrap_or(10) * p.failure_threshold.unwrap_or(3);
        assert!(
            budget >= 600,
            "startup budget {budget}s is too short for a large model"
        );
        assert!(first_container(&d).readiness_probe.is_some());
        assert!(first_container(&d).liveness_probe.is_some());
    }

    #[test]
    fn scheduling_constraints_are_passed_through() {
        let d = build(&valid(), None);
        let pod = d.spec.template.spec.expect("pod");
        assert_eq!(
            pod.node_selector
                .expect("nodeSelector")
                .get("gpu")
                .map(String::as_str),
            Some("a100")
        );
        assert_eq!(pod.tolerations.expect("tolerations").len(), 1);
    }

    #[test]
    fn pods_carry_the_model_version_but_the_selector_does_not() {
        let d = build(&valid(), None);
        let spec = d.spec;
        let pod_labels = spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .expect("labels");
        assert_eq!(
            pod_labels
                .get(super::super::labels::MODEL_VERSION_LABEL)
                .map(String::as_str),
            Some("2024-07-23")
        );
        let sel = spec.selector.match_labels.expect("matchLabels");
        assert_eq!(sel.len(), 2);
        assert!(
            sel.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
            "selector must match the pods"
        );
    }
}
