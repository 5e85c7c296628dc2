//! The endpoint picker (EPP) of an InferencePool: the process a Gateway asks,
//! for every request, which model server should take it.
//!
//! Laid out as the Gateway API Inference Extension's own chart lays it out
//! (v1.5.0, the last release that shipped the EPP; see
//! docs/inference-gateway.md): a Deployment and a Service per pool, and,
//! shared by the pools of one ModelService, a ServiceAccount, a Role that
//! reads what the picker watches, its RoleBinding, and the picker's plugin
//! configuration in a ConfigMap. Nothing here comes from the ModelService
//! but its name, namespace and preset: a tenant cannot widen what the
//! picker may read or run.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, GRPCAction,
    ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, Service,
    ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ValidSpec;
use super::labels::common_labels;
use crate::api::{Preset, inference};

/// The picker's image when the operator's `--endpoint-picker-image` is not
/// set: the last EPP the Inference Extension itself released (v1.6.0 moved
/// the picker to llm-d's router and ships none). It reads v1 pools.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0";

/// The gRPC ext-proc port the Gateway calls (the pool's endpointPickerRef).
pub const GRPC_PORT: i32 = 9002;
/// The gRPC health port the probes call.
pub const HEALTH_PORT: i32 = 9003;
/// The picker's own Prometheus metrics.
pub const METRICS_PORT: i32 = 9090;
/// The gRPC health service the picker answers SERVING on once its pool is
/// synced (with one replica, no leader election).
const HEALTH_SERVICE: &str = "inference-extension";
/// Where the ConfigMap is mounted, and its one key.
const CONFIG_DIR: &str = "/config";
const CONFIG_KEY: &str = "default-plugins.yaml";
/// The pod label that tells the pickers' pods apart. They carry no
/// `managed-by` label: they are not model servers, so neither the model's
/// Service, its pool, nor the operator's pod diagnosis may count them.
pub const PICKER_LABEL: &str = "serving.modelservice.dev/endpoint-picker";

/// The name of the objects one ModelService's pickers share, and of the
/// stable pool's picker: `<name>-epp`.
pub fn shared_name(name: &str) -> String {
    picker_name(name)
}

/// The picker of the pool `pool`: `<pool>-epp`.
pub fn picker_name(pool: &str) -> String {
    format!("{pool}-epp")
}

/// What the scorers read from each model server's `/metrics`. vLLM's names
/// are the picker's defaults; SGLang's engine is named in the config (the
/// picker's per-flag metric names are refused since v1.4).
pub fn engine(preset: Option<Preset>) -> Option<&'static str> {
    match preset {
        None | Some(Preset::Vllm) | Some(Preset::None) => Some("vllm"),
        Some(Preset::Sglang) => Some("sglang"),
        Some(Preset::Tgi) => None,
    }
}

fn meta(v: &ValidSpec, name: String, owner: Option<&OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(v.namespace.clone()),
        labels: Some(common_labels(&v.name)),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..ObjectMeta::default()
    }
}

fn pod_labels(picker: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "endpoint-picker".to_string(),
        ),
        (PICKER_LABEL.to_string(), picker.to_string()),
    ])
}

/// The picker's plugins: the chart's default profile (queue, KV-cache use
/// and prefix-cache scorers, weights 2, 2 and 3), scraping each pod's
/// `/metrics` on its pool port.
pub fn config(v: &ValidSpec, owner: Option<&OwnerReference>) -> ConfigMap {
    let engine = match engine(v.spec.runtime.preset) {
        Some("vllm") | None => String::new(),
        Some(e) => format!("\n  parameters:\n    defaultEngine: {e}"),
    };
    let text = format!(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
  parameters:
    scheme: http
    path: /metrics
- type: core-metrics-extractor{engine}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"
    );
    ConfigMap {
        metadata: meta(v, shared_name(&v.name), owner),
        data: Some(BTreeMap::from([(CONFIG_KEY.to_string(), text)])),
        ..ConfigMap::default()
    }
}

/// The picker's identity.
pub fn service_account(v: &ValidSpec, owner: Option<&OwnerReference>) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(v, shared_name(&v.name), owner),
        automount_service_account_token: Some(true),
        ..ServiceAccount::default()
    }
}

/// What the picker reads, in this namespace only, as the upstream chart
/// grants it: the pods it picks among, its pool, and the objectives and
/// rewrites users attach to a pool. The operator holds each of these
/// itself (see `permissions`): Kubernetes lets nobody grant more than it
/// has.
pub fn role(v: &ValidSpec, owner: Option<&OwnerReference>) -> Role {
    let read = || {
        ["get", "list", "watch"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let rule = |group: &str, resources: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: read(),
        ..PolicyRule::default()
    };
    Role {
        metadata: meta(v, shared_name(&v.name), owner),
        rules: Some(vec![
            rule("", &["pods"]),
            rule(inference::GROUP, &["inferencepools"]),
            rule(
                inference::EXPERIMENTAL_GROUP,
                &["inferenceobjectives", "inferencemodelrewrites"],
            ),
        ]),
    }
}

/// Binds the Role to the picker's ServiceAccount, and to nothing else.
pub fn role_binding(v: &ValidSpec, owner: Option<&OwnerReference>) -> RoleBinding {
    let name = shared_name(&v.name);
    RoleBinding {
        metadata: meta(v, name.clone(), owner),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name,
            namespace: Some(v.namespace.clone()),
            ..Subject::default()
        }]),
    }
}

/// The picker of pool `pool`: one replica (several would need the picker's
/// leader election and a Lease permission); a rolling update starts the new
/// picker before the old one stops, so the Gateway always has one to ask.
pub fn deployment(
    v: &ValidSpec,
    pool: &str,
    image: &str,
    owner: Option<&OwnerReference>,
) -> Deployment {
    let name = picker_name(pool);
    let labels = pod_labels(&name);
    let field = |path: &str| EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            field_path: path.to_string(),
            ..ObjectFieldSelector::default()
        }),
        ..EnvVarSource::default()
    };
    let port = |name: &str, port: i32| ContainerPort {
        name: Some(name.to_string()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    };
    let grpc_probe = |period: i32, delay: Option<i32>| Probe {
        grpc: Some(GRPCAction {
            port: HEALTH_PORT,
            service: Some(HEALTH_SERVICE.into()),
            ..GRPCAction::default()
        }),
        period_seconds: Some(period),
        initial_delay_seconds: delay,
        ..Probe::default()
    };
    let args = [
        "--pool-name",
        pool,
        "--pool-namespace",
        &v.namespace,
        "--pool-group",
        inference::GROUP,
        "--zap-encoder",
        "json",
        "--config-file",
        &format!("{CONFIG_DIR}/{CONFIG_KEY}"),
        // Scraping the picker's metrics would need a cluster-wide
        // TokenReview grant, which a ModelService's objects never get.
        "--metrics-endpoint-auth=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let container = Container {
        name: "epp".into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(args),
        env: Some(vec![
            EnvVar {
                name: "NAMESPACE".into(),
                value_from: Some(field("metadata.namespace")),
                ..EnvVar::default()
            },
            EnvVar {
                name: "POD_NAME".into(),
                value_from: Some(field("metadata.name")),
                ..EnvVar::default()
            },
        ]),
        ports: Some(vec![
            port("grpc", GRPC_PORT),
            port("grpc-health", HEALTH_PORT),
            port("metrics", METRICS_PORT),
        ]),
        liveness_probe: Some(grpc_probe(10, Some(5))),
        readiness_probe: Some(grpc_probe(2, None)),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("500m".into())),
                ("memory".to_string(), Quantity("512Mi".into())),
            ])),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    Deployment {
        metadata: meta(v, name, owner),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(shared_name(&v.name)),
                    // Requests in flight finish before the picker stops.
                    termination_grace_period_seconds: Some(130),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "config".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: shared_name(&v.name),
                            ..ConfigMapVolumeSource::default()
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

/// The picker's Service, which the pool's endpointPickerRef names: the
/// ext-proc port over HTTP/2, and the metrics port.
pub fn service(v: &ValidSpec, pool: &str, owner: Option<&OwnerReference>) -> Service {
    let name = picker_name(pool);
    let port = |n: &str, p: i32, proto: Option<&str>| ServicePort {
        name: Some(n.to_string()),
        port: p,
        target_port: Some(IntOrString::Int(p)),
        protocol: Some("TCP".into()),
        app_protocol: proto.map(str::to_string),
        ..ServicePort::default()
    };
    Service {
        metadata: meta(v, name.clone(), owner),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(pod_labels(&name)),
            ports: Some(vec![
                port("grpc-ext-proc", GRPC_PORT, Some("http2")),
                port("http-metrics", METRICS_PORT, None),
            ]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::children::tests::valid;
    use crate::core::labels::{INSTANCE_LABEL, MANAGED_BY_LABEL, NAME_LABEL};

    #[test]
    fn the_picker_serves_its_pool_on_the_ports_the_pool_names() {
        let v = valid();
        let d = deployment(&v, "llama", DEFAULT_IMAGE, None);
        let j = serde_json::to_value(&d).expect("json");
        assert_eq!(j["metadata"]["name"], "llama-epp");
        let c = &j["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], DEFAULT_IMAGE);
        let args: Vec<&str> = c["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert_eq!(
            &args[..6],
            [
                "--pool-name",
                "llama",
                "--pool-namespace",
                "ml",
                "--pool-group",
                "inference.networking.k8s.io"
            ]
        );
        assert!(args.contains(&"/config/default-plugins.yaml"));
        assert_eq!(c["readinessProbe"]["grpc"]["port"], HEALTH_PORT);
        assert_eq!(
            j["spec"]["template"]["spec"]["serviceAccountName"],
            "llama-epp"
        );
        let s = serde_json::to_value(service(&v, "llama", None)).expect("json");
        assert_eq!(s["spec"]["ports"][0]["port"], GRPC_PORT);
        assert_eq!(s["spec"]["ports"][0]["appProtocol"], "http2");
        assert_eq!(
            s["spec"]["selector"],
            j["spec"]["template"]["metadata"]["labels"]
        );
    }

    #[test]
    fn the_pickers_pods_are_neither_model_pods_nor_watched_as_ours() {
        let v = valid();
        let d = deployment(&v, "llama-canary", DEFAULT_IMAGE, None);
        let labels = d
            .spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .expect("labels");
        assert_eq!(
            labels.get(PICKER_LABEL).map(String::as_str),
            Some("llama-canary-epp")
        );
        assert_eq!(
            labels.get(NAME_LABEL).map(String::as_str),
            Some("endpoint-picker")
        );
        assert!(!labels.contains_key(INSTANCE_LABEL));
        assert!(!labels.contains_key(MANAGED_BY_LABEL));
    }

    #[test]
    fn the_role_reads_only_what_the_picker_watches_and_binds_only_its_account() {
        let v = valid();
        let r = serde_json::to_value(role(&v, None)).expect("json");
        for rule in r["rules"].as_array().expect("rules") {
            assert_eq!(rule["verbs"], serde_json::json!(["get", "list", "watch"]));
        }
        assert_eq!(r["rules"][0]["resources"], serde_json::json!(["pods"]));
        let b = role_binding(&v, None);
        assert_eq!(b.role_ref.name, "llama-epp");
        let subjects = b.subjects.expect("subjects");
        assert_eq!(subjects.len(), 1);
        assert_eq!(
            (subjects[0].kind.as_str(), subjects[0].name.as_str()),
            ("ServiceAccount", "llama-epp")
        );
    }

    #[test]
    fn the_config_names_the_engine_whose_metrics_the_scorers_read() {
        let mut v = valid();
        let text = |v: &ValidSpec| {
            config(v, None)
                .data
                .and_then(|d| d.get(CONFIG_KEY).cloned())
                .unwrap_or_default()
        };
        assert!(!text(&v).contains("defaultEngine"), "vLLM is the default");
        v.spec.runtime.preset = Some(Preset::Sglang);
        assert!(text(&v).contains("defaultEngine: sglang"));
        let parsed: serde_yaml::Value = serde_yaml::from_str(&text(&v)).expect("yaml");
        assert_eq!(parsed["kind"].as_str(), Some("EndpointPickerConfig"));
        assert_eq!(
            parsed["plugins"][4]["type"].as_str(),
            Some("core-metrics-extractor")
        );
        assert_eq!(engine(Some(Preset::Tgi)), None);
    }
}
