//! Micro-benchmarks of the pure code: the path one reconcile runs for one
//! ModelService (validate, build the three children, compute the status,
//! and decide by subset comparison that nothing needs to be applied), and
//! one conversion as the webhook runs it for each object the API server
//! sends (through v1, the hub).

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use modelservice_operator::api::ModelService;
use modelservice_operator::core::diagnosis::GpuRequest;
use modelservice_operator::core::status::{Observed, compute};
use modelservice_operator::core::subset::is_subset;
use modelservice_operator::core::{build_children, validate};
use std::hint::black_box;

const MS: &str = r#"
apiVersion: serving.modelservice.dev/v1
kind: ModelService
metadata: {name: llama, namespace: ml, uid: 0b7c6a6e-1111-2222-3333-444455556666, generation: 3}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct, version: "2024-07-23"}
  runtime:
    image: vllm/vllm-openai:v0.8.5
    args: ["--max-model-len", "8192"]
    env: [{name: HF_HOME, value: /cache}]
  resources: {gpus: 1, cpu: "4", memory: 32Gi}
  scheduling:
    nodeSelector: {gpu: a100}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  autoscaling: {minReplicas: 1, maxReplicas: 8, targetQueueLength: 5}
"#;

fn pure_path(c: &mut Criterion) {
    let ms: ModelService = serde_yaml::from_str(MS).expect("sample");
    let owner = OwnerReference {
        api_version: "serving.modelservice.dev/v1".into(),
        kind: "ModelService".into(),
        name: "llama".into(),
        uid: "0b7c6a6e-1111-2222-3333-444455556666".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut observed_dep: Deployment =
        build_children(&validate(&ms, "default").expect("valid"), Some(&owner))
            .deployment
            .expect("one pod per replica: a Deployment");
    observed_dep.metadata.generation = Some(1);
    observed_dep.status = serde_json::from_value(serde_json::json!({"observedGeneration": 1, "replicas": 1,
        "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}))
    .expect("status");
    let observed_json = serde_json::to_value(&observed_dep).expect("json");
    let now = Time(Timestamp::from_second(1_700_000_000).expect("ts"));

    c.bench_function("validate+build+status+subset (one ModelService)", |b| {
        b.iter(|| {
            let v = validate(black_box(&ms), "default").expect("valid");
            let children = build_children(&v, Some(&owner));
            let desired = serde_json::to_value(&children.deployment).expect("json");
            let unchanged = is_subset(&desired, &observed_json);
            let o = Observed {
                name: &v.name,
                namespace: &v.namespace,
                generation: 3,
                port: Some(v.spec.runtime.port),
                gpu: GpuRequest {
                    gpus: v.spec.resources.gpus,
                    resource: &v.spec.resources.gpu_resource,
                },
                blocked: None,
                deployment: Some((&observed_dep).into()),
                surge: None,
                pods: &[],
                autoscaler: None,
                canary: None,
                route: None,
                recreating: None,
                groups: false,
                weights: None,
            };
            black_box((unchanged, compute(ms.status.as_ref(), &o, &now)))
        })
    });
}

fn conversion(c: &mut Criterion) {
    use modelservice_operator::core::convert::{V1, V1ALPHA1, V1BETA1, convert_checked};
    let v1: serde_json::Value = serde_yaml::from_str(MS).expect("sample");
    let alpha = convert_checked(v1.clone(), V1ALPHA1).expect("to v1alpha1");
    let beta = convert_checked(v1.clone(), V1BETA1).expect("to v1beta1");
    for (name, from, to) in [
        ("convert v1alpha1 -> v1 (checked)", &alpha, V1),
        ("convert v1 -> v1alpha1", &v1, V1ALPHA1),
        ("convert v1beta1 -> v1 (checked)", &beta, V1),
        ("convert v1alpha1 -> v1beta1 (two hops)", &alpha, V1BETA1),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| black_box(convert_checked(black_box(from.clone()), to)))
        });
    }
}

criterion_group!(benches, pure_path, conversion);
criterion_main!(benches);
