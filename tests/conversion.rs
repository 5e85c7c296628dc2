//! Conversion between the three served versions, through v1 as the hub:
//! lossless in all six directions for every valid object, each result
//! valid against its target version's schema (property tests); the fields
//! an older version lacks carried in the annotation, under the trust rules;
//! and the children of an object written in v1alpha1 exactly what the
//! release before v1beta1 built, so an upgrade restarts no pod.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{EnvVar, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use modelservice_operator::api::{self, v1alpha1, v1beta1};
use modelservice_operator::core::convert::{
    ConversionError, FIELDS_ANNOTATION, LEGACY_FIELDS_ANNOTATION, V1, V1ALPHA1, V1BETA1,
    convert_checked, convert_object,
};
use modelservice_operator::runtime::render::render;
use proptest::prelude::*;
use serde_json::{Value, json};

fn quantity() -> impl Strategy<Value = Quantity> {
    prop_oneof![Just("4"), Just("500m"), Just("32Gi"), Just("1.5")].prop_map(|q| Quantity(q.into()))
}

fn env() -> impl Strategy<Value = Vec<EnvVar>> {
    prop::collection::vec(
        ("[A-Z_]{1,8}", proptest::option::of("[a-z0-9/]{0,8}")).prop_map(|(name, value)| EnvVar {
            name,
            value,
            value_from: None,
        }),
        0..3,
    )
}

fn tolerations() -> impl Strategy<Value = Vec<Toleration>> {
    prop::collection::vec(
        ("[a-z./]{1,12}", prop_oneof![Just("Exists"), Just("Equal")]).prop_map(|(key, op)| {
            Toleration {
                key: Some(key),
                operator: Some(op.into()),
                effect: Some("NoSchedule".into()),
                ..Toleration::default()
            }
        }),
        0..2,
    )
}

fn node_selector() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map("[a-z./]{1,10}", "[a-z0-9]{0,6}", 0..3)
}

fn strategy() -> impl Strategy<Value = api::RolloutStrategy> {
    prop_oneof![
        Just(api::RolloutStrategy::RollingUpdate),
        Just(api::RolloutStrategy::Recreate)
    ]
}

/// Bounds that the schema's CEL rule accepts (max >= min).
fn bounds() -> impl Strategy<Value = (i32, i32, i32, String)> {
    (
        1..=100i32,
        0..=50i32,
        1..=20i32,
        prop_oneof![Just("q"), Just("vllm:num_requests_waiting")],
    )
        .prop_map(|(min, extra, t, m)| (min, (min + extra).min(100), t, m.to_string()))
}

fn metadata() -> impl Strategy<Value = Value> {
    (
        "[a-z][a-z0-9-]{0,10}[a-z0-9]",
        proptest::option::of(prop::collection::btree_map(
            "[a-z]{1,6}",
            "[a-z]{0,6}",
            1..3,
        )),
        proptest::option::of(prop::collection::btree_map(
            "[a-z.]{1,8}/[a-z]{1,6}",
            "[ -~]{0,12}",
            1..3,
        )),
        1..20i64,
    )
        .prop_map(|(name, labels, annotations, generation)| {
            let mut m = json!({"name": name, "namespace": "ml", "uid": "u-1",
                "resourceVersion": "42", "generation": generation,
                "finalizers": ["serving.modelservice.dev/cleanup"]});
            if let Some(l) = labels {
                m["labels"] = json!(l);
            }
            if let Some(a) = annotations {
                m["annotations"] = json!(a);
            }
            m
        })
}

fn status() -> impl Strategy<Value = Option<Value>> {
    proptest::option::of((0..5i32, 0..5i64).prop_map(|(ready, g)| {
        json!({"observedGeneration": g, "readyReplicas": ready, "url": "http://m.ml.svc:8000",
            "conditions": [{"type": "Ready", "status": "False", "reason": "RollingOut",
                "message": "0/1", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": g}]})
    }))
}

fn alpha_spec() -> impl Strategy<Value = v1alpha1::ModelServiceSpec> {
    (
        (
            "[a-zA-Z0-9/._-]{1,30}",
            proptest::option::of("[0-9-]{1,10}"),
            "[a-z0-9/.:-]{1,30}",
        ),
        (prop::collection::vec("[ -~]{0,10}", 0..3), env()),
        (
            1..=100i32,
            1..=65535i32,
            0..=16i32,
            prop_oneof![Just("nvidia.com/gpu"), Just("amd.com/gpu")],
        ),
        (
            proptest::option::of(quantity()),
            proptest::option::of(quantity()),
        ),
        (
            node_selector(),
            tolerations(),
            strategy(),
            proptest::option::of(bounds()),
        ),
    )
        .prop_map(
            |(
                (model, model_version, image),
                (args, env),
                (replicas, port, gpus, gpu_resource),
                (cpu, memory),
                (node_selector, tolerations, strategy, autoscaling),
            )| {
                v1alpha1::ModelServiceSpec {
                    model,
                    model_version,
                    image,
                    args,
                    env,
                    replicas,
                    port,
                    gpus,
                    gpu_resource: gpu_resource.into(),
                    // `resources: {}` and no resources mean the same; the typed
                    // form writes neither for an empty one.
                    resources: (cpu.is_some() || memory.is_some())
                        .then_some(v1alpha1::ResourceRequests { cpu, memory }),
                    node_selector,
                    tolerations,
                    strategy,
                    autoscaling: autoscaling.map(
                        |(min_replicas, max_replicas, target_queue_length, metric)| {
                            v1alpha1::Autoscaling {
                                min_replicas,
                                max_replicas,
                                target_queue_length,
                                metric,
                            }
                        },
                    ),
                }
            },
        )
}

fn preset() -> impl Strategy<Value = Option<api::Preset>> {
    proptest::option::of(prop_oneof![
        Just(api::Preset::Vllm),
        Just(api::Preset::Sglang),
        Just(api::Preset::Tgi),
        Just(api::Preset::None)
    ])
}

/// The autoscaling fields v1alpha1 lacks (KEDA), any of them set or not.
type KedaFields = (
    Option<api::Engine>,
    Option<String>,
    Option<i32>,
    Option<i32>,
    Option<i32>,
);

fn keda_fields() -> impl Strategy<Value = KedaFields> {
    (
        proptest::option::of(prop_oneof![Just(api::Engine::Hpa), Just(api::Engine::Keda)]),
        proptest::option::of("http://[a-z]{1,8}:9090"),
        proptest::option::of(0..10i32),
        proptest::option::of(0..600i32),
        proptest::option::of(1..60i32),
    )
}

/// The version-strategy fields, all v1beta1-only: surge, canary, route.
fn version_strategy()
-> impl Strategy<Value = (Option<api::Surge>, Option<api::Canary>, Option<api::Route>)> {
    let canary = (
        proptest::option::of("[0-9-]{1,10}"),
        proptest::option::of("[a-z]{1,8}:v[0-9]"),
        proptest::option::of(prop::collection::vec("--[a-z]{1,6}", 0..3)),
        proptest::option::of(env()),
        1..=5i32,
        0..=100i32,
    )
        .prop_map(
            |(version, image, args, env, replicas, weight)| api::Canary {
                model: version.map(|v| api::CanaryModel { version: Some(v) }),
                runtime: (image.is_some() || args.is_some() || env.is_some())
                    .then_some(api::CanaryRuntime { image, args, env }),
                replicas,
                weight,
            },
        );
    let route = (
        "[a-z]{1,8}",
        proptest::option::of("[a-z]{1,8}"),
        prop::collection::vec("[a-z]{1,8}\\.example", 0..3),
        prop_oneof![Just("/"), Just("/v1")],
        proptest::option::of(prop_oneof![
            Just(api::RouteBackend::Service),
            Just(api::RouteBackend::InferencePool)
        ]),
        prop_oneof![
            Just(api::FailureMode::FailOpen),
            Just(api::FailureMode::FailClose)
        ],
    )
        .prop_map(
            |(gw, ns, hostnames, path, backend, failure_mode)| api::Route {
                parent_refs: vec![api::ParentReference {
                    name: gw,
                    namespace: ns,
                    section_name: None,
                    port: None,
                    group: None,
                    kind: None,
                }],
                hostnames,
                path: path.to_string(),
                // The schema allows inferencePool only with backend InferencePool.
                inference_pool: (backend == Some(api::RouteBackend::InferencePool))
                    .then_some(api::InferencePoolOptions { failure_mode }),
                backend,
            },
        );
    (
        proptest::option::of(prop_oneof![Just(api::Surge::Auto), Just(api::Surge::Never)]),
        proptest::option::of(canary),
        proptest::option::of(route),
    )
}

/// `parallelism`, v1beta1-only: one pod or a group per replica.
fn parallelism() -> impl Strategy<Value = Option<api::Parallelism>> {
    proptest::option::of(
        (proptest::option::of(1..=8i32), 1..=4i32)
            .prop_map(|(tensor, pipeline)| api::Parallelism { tensor, pipeline }),
    )
}

/// `model.source` and `model.cache`, v1beta1-only: where the weights come
/// from and the claim they are kept in.
fn weights() -> impl Strategy<Value = (Option<api::ModelSource>, Option<api::ModelCache>)> {
    let source = (
        prop_oneof![
            "hf://[a-z]{1,6}/[a-z0-9-]{1,8}@[0-9a-f]{7}",
            "pvc://[a-z]{1,8}/[a-z]{0,8}",
        ],
        proptest::option::of("[a-z]{1,8}"),
    )
        .prop_map(|(uri, credentials_secret)| api::ModelSource {
            uri,
            credentials_secret,
        });
    let cache = (
        prop_oneof![Just("1Gi"), Just("200Gi")],
        proptest::option::of("[a-z]{1,8}"),
        proptest::option::of(prop_oneof![
            Just(api::CacheAccessMode::ReadWriteOnce),
            Just(api::CacheAccessMode::ReadWriteMany)
        ]),
    )
        .prop_map(|(size, storage_class_name, access_mode)| api::ModelCache {
            size: k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.to_string()),
            storage_class_name,
            access_mode,
        });
    (proptest::option::of(source), proptest::option::of(cache))
}

fn v1_spec() -> impl Strategy<Value = api::ModelServiceSpec> {
    (
        alpha_spec(),
        preset(),
        keda_fields(),
        version_strategy(),
        parallelism(),
        weights(),
    )
        .prop_map(
            |(a, preset, keda, (surge, canary, route), parallelism, (source, cache))| {
                api::ModelServiceSpec {
                    parallelism,
                    model: api::Model {
                        name: a.model,
                        version: a.model_version,
                        source: source.map(Box::new),
                        cache: cache.map(Box::new),
                    },
                    runtime: api::Runtime {
                        image: a.image,
                        preset,
                        args: a.args,
                        env: a.env,
                        port: a.port,
                    },
                    replicas: a.replicas,
                    resources: api::Resources {
                        gpus: a.gpus,
                        gpu_resource: a.gpu_resource,
                        cpu: a.resources.as_ref().and_then(|r| r.cpu.clone()),
                        memory: a.resources.and_then(|r| r.memory),
                    },
                    scheduling: api::Scheduling {
                        node_selector: a.node_selector,
                        tolerations: a.tolerations,
                    },
                    rollout: api::Rollout {
                        strategy: a.strategy,
                        surge,
                        canary: canary.map(Box::new),
                    },
                    route: route.map(Box::new),
                    autoscaling: a.autoscaling.map(|x| {
                        Box::new(api::Autoscaling {
                            engine: keda.0,
                            // Scale to zero, with KEDA, in some cases.
                            min_replicas: if keda.0 == Some(api::Engine::Keda)
                                && x.min_replicas % 2 == 0
                            {
                                0
                            } else {
                                x.min_replicas
                            },
                            max_replicas: x.max_replicas,
                            target_queue_length: x.target_queue_length,
                            metric: x.metric,
                            // `keda: {}` and no keda mean the same, and
                            // v1beta1 has no place for the empty object.
                            keda: (keda.1.is_some()
                                || keda.2.is_some()
                                || keda.3.is_some()
                                || keda.4.is_some())
                            .then(|| api::KedaOptions {
                                prometheus: keda.1.map(|address| api::PrometheusSource { address }),
                                activation_queue_length: keda.2,
                                cooldown_seconds: keda.3,
                                polling_seconds: keda.4,
                            }),
                        })
                    }),
                }
            },
        )
}

fn object(api_version: &str, spec: Value, metadata: Value, status: Option<Value>) -> Value {
    let mut o = json!({"apiVersion": api_version, "kind": "ModelService", "metadata": metadata, "spec": spec});
    if let Some(s) = status {
        o["status"] = s;
    }
    o
}

/// The same spec as v1beta1 writes it, mapped by hand (not by the code
/// under test): the KEDA knobs flat in `autoscaling`.
fn beta_of(spec: &api::ModelServiceSpec) -> v1beta1::ModelServiceSpec {
    v1beta1::ModelServiceSpec {
        model: spec.model.clone(),
        runtime: spec.runtime.clone(),
        replicas: spec.replicas,
        resources: spec.resources.clone(),
        scheduling: spec.scheduling.clone(),
        rollout: spec.rollout.clone(),
        route: spec.route.as_deref().cloned(),
        parallelism: spec.parallelism.clone(),
        autoscaling: spec.autoscaling.as_ref().map(|a| {
            let keda = a.keda();
            v1beta1::Autoscaling {
                engine: a.engine,
                min_replicas: a.min_replicas,
                max_replicas: a.max_replicas,
                target_queue_length: a.target_queue_length,
                metric: a.metric.clone(),
                prometheus: keda.prometheus,
                activation_queue_length: keda.activation_queue_length,
                cooldown_seconds: keda.cooldown_seconds,
                polling_seconds: keda.polling_seconds,
            }
        }),
    }
}

/// The problems the schema of `obj`'s own version (and its CEL rules) finds
/// in it. A conversion to an older version is a read, never refused, so its
/// result must hold by construction; one to v1 is checked by the webhook
/// too, but must hold here for every valid source.
fn schema_errors(obj: &Value) -> Vec<String> {
    static CRD: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let crd =
        CRD.get_or_init(|| serde_json::to_value(api::crd().expect("versions merge")).expect("CRD"));
    let version = obj["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit('/').next())
        .unwrap_or_default();
    let schema = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == version))
        .map(|v| &v["schema"]["openAPIV3Schema"])
        .unwrap_or_else(|| panic!("a schema for {version}"));
    let mut errors: Vec<String> = jsonschema::validator_for(schema)
        .expect("the schema compiles")
        .iter_errors(obj)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    if let Err(cel) = kube::core::cel::Validator::new().validate(schema, obj, None) {
        errors.extend(cel.into_vec().into_iter().map(|e| e.to_string()));
    }
    errors
}

/// Whether a v1 spec has anything v1alpha1 cannot say. Surge Never is what
/// v1alpha1 means; unset (the default, Auto) is kept, as null.
fn beyond_v1alpha1(spec: &api::ModelServiceSpec) -> bool {
    spec.runtime.preset.is_some()
        || spec.rollout.surge != Some(api::Surge::Never)
        || spec.rollout.canary.is_some()
        || spec.route.is_some()
        || spec.parallelism.is_some()
        || spec.model.source.is_some()
        || spec.model.cache.is_some()
        || spec
            .autoscaling
            .as_ref()
            .is_some_and(|a| a.engine.is_some() || a.keda.is_some() || a.min_replicas == 0)
}

/// `from` → `to` → `from`, asserting that both results validate against
/// their schema and the trip ends where it started.
fn round_trip(from: &Value, to: &str) -> Result<Value, TestCaseError> {
    let there = convert(from.clone(), to);
    prop_assert_eq!(
        schema_errors(&there),
        Vec::<String>::new(),
        "{} validates",
        to
    );
    let back_to = from["apiVersion"].as_str().unwrap_or_default();
    let back = convert(there.clone(), back_to);
    prop_assert_eq!(
        schema_errors(&back),
        Vec::<String>::new(),
        "{} validates",
        back_to
    );
    prop_assert_eq!(
        &back,
        from,
        "{} → {} → {} is the identity",
        back_to,
        to,
        back_to
    );
    Ok(there)
}

fn convert(v: Value, to: &str) -> Value {
    convert_object(v, to).expect("a valid object converts")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// v1alpha1 → v1 → v1alpha1, and v1alpha1 → v1beta1 → v1alpha1.
    #[test]
    fn v1alpha1_objects_round_trip_through_v1_and_v1beta1(spec in alpha_spec(), meta in metadata(), status in status()) {
        let alpha = object(V1ALPHA1, serde_json::to_value(&spec).expect("spec"), meta, status);
        let v1 = round_trip(&alpha, V1)?;
        prop_assert!(v1["metadata"]["annotations"].get(FIELDS_ANNOTATION).is_none());
        let typed: api::ModelService = serde_json::from_value(v1.clone()).expect("a v1 object");
        prop_assert_eq!(typed.spec.runtime.preset, None, "v1alpha1 reads as the v1alpha1 command line");
        prop_assert_eq!(typed.spec.rollout.surge, Some(api::Surge::Never), "v1alpha1 never surges");
        prop_assert_eq!(convert_checked(alpha.clone(), V1).map(|_| ()), Ok(()), "the webhook agrees");
        let beta = round_trip(&alpha, V1BETA1)?;
        prop_assert!(beta["metadata"]["annotations"].get(FIELDS_ANNOTATION).is_none());
        prop_assert_eq!(convert(beta, V1), v1, "through v1beta1 or not, the same v1 object");
    }

    /// v1beta1 → v1 → v1beta1, and v1beta1 → v1alpha1 → v1beta1.
    #[test]
    fn v1beta1_objects_round_trip_through_v1_and_v1alpha1(spec in v1_spec(), meta in metadata(), status in status()) {
        let beta = object(V1BETA1, serde_json::to_value(beta_of(&spec)).expect("spec"), meta.clone(), status.clone());
        let v1 = round_trip(&beta, V1)?;
        prop_assert_eq!(
            &v1,
            &object(V1, serde_json::to_value(&spec).expect("spec"), meta, status),
            "v1beta1 reads in v1 as the same spec, written in v1"
        );
        let alpha = round_trip(&beta, V1ALPHA1)?;
        prop_assert_eq!(
            alpha["metadata"]["annotations"].get(FIELDS_ANNOTATION).is_some(),
            beyond_v1alpha1(&spec),
            "the annotation holds exactly what v1alpha1 cannot say"
        );
    }

    /// v1 → v1beta1 → v1, and v1 → v1alpha1 → v1.
    #[test]
    fn v1_objects_round_trip_through_v1beta1_and_v1alpha1(spec in v1_spec(), meta in metadata(), status in status()) {
        let v1 = object(V1, serde_json::to_value(&spec).expect("spec"), meta.clone(), status.clone());
        let beta = round_trip(&v1, V1BETA1)?;
        prop_assert_eq!(
            &beta,
            &object(V1BETA1, serde_json::to_value(beta_of(&spec)).expect("spec"), meta, status),
            "v1beta1 has a place for every v1 field: no annotation"
        );
        let alpha = round_trip(&v1, V1ALPHA1)?;
        let typed: v1alpha1::ModelService = serde_json::from_value(alpha.clone()).expect("a v1alpha1 object");
        prop_assert_eq!(&typed.spec.image, &spec.runtime.image);
        if let Some(min) = typed.spec.autoscaling.as_ref().map(|a| a.min_replicas) {
            prop_assert!(min >= 1, "v1alpha1 shows a minReplicas its schema accepts");
        }
        prop_assert_eq!(
            alpha["metadata"]["annotations"].get(FIELDS_ANNOTATION).is_some(),
            beyond_v1alpha1(&spec),
            "the annotation holds exactly what v1alpha1 cannot say"
        );
        prop_assert_eq!(convert_checked(alpha, V1).map(|_| ()), Ok(()), "the webhook agrees");
    }
}

fn sglang() -> Value {
    json!({"apiVersion": V1BETA1, "kind": "ModelService",
        "metadata": {"name": "m", "namespace": "ml"},
        "spec": {"model": {"name": "qwen"}, "runtime": {"image": "sglang:1", "preset": "sglang"}}})
}

#[test]
fn a_v1beta1_only_field_waits_in_the_annotation_and_comes_back() {
    let alpha = convert(sglang(), V1ALPHA1);
    assert_eq!(
        alpha["metadata"]["annotations"][FIELDS_ANNOTATION],
        r#"{"rollout":{"surge":null},"runtime":{"preset":"sglang"}}"#,
        "surge unset (Auto) is kept as null: v1alpha1 itself means Never"
    );
    assert_eq!(alpha["spec"], json!({"model": "qwen", "image": "sglang:1"}));
    let back = convert(alpha, V1BETA1);
    assert_eq!(back, sglang(), "and the annotation is gone");
}

#[test]
fn an_edit_in_v1alpha1_keeps_both_the_edit_and_the_v1beta1_only_fields() {
    let mut alpha = convert(sglang(), V1ALPHA1);
    alpha["spec"]["image"] = json!("sglang:2");
    alpha["metadata"]["annotations"]["team"] = json!("ml");
    let back = convert(alpha, V1BETA1);
    assert_eq!(
        back["spec"]["runtime"],
        json!({"image": "sglang:2", "preset": "sglang"})
    );
    assert_eq!(back["metadata"]["annotations"], json!({"team": "ml"}));
}

#[test]
fn kept_fields_of_an_object_removed_in_v1alpha1_go_with_it() {
    // A v1beta1-only field inside autoscaling (as KEDA's engine will be).
    let mut beta = sglang();
    beta["spec"]["autoscaling"] = json!({"maxReplicas": 3, "engine": "KEDA"});
    let mut alpha = convert(beta, V1ALPHA1);
    alpha["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("autoscaling");
    let back = convert(alpha, V1BETA1);
    assert!(back["spec"].get("autoscaling").is_none(), "{back}");
    assert_eq!(back["spec"]["runtime"]["preset"], "sglang");
}

fn scaled_to_zero() -> Value {
    let mut beta = sglang();
    beta["spec"]["autoscaling"] =
        json!({"engine": "KEDA", "minReplicas": 0, "maxReplicas": 3, "targetQueueLength": 5});
    beta
}

#[test]
fn scale_to_zero_reads_as_one_in_v1alpha1_and_comes_back_as_zero() {
    let alpha = convert(scaled_to_zero(), V1ALPHA1);
    assert_eq!(alpha["spec"]["autoscaling"]["minReplicas"], 1);
    assert_eq!(
        alpha["metadata"]["annotations"][FIELDS_ANNOTATION],
        r#"{"autoscaling":{"engine":"KEDA","minReplicas":0},"rollout":{"surge":null},"runtime":{"preset":"sglang"}}"#
    );
    assert_eq!(convert(alpha, V1BETA1), scaled_to_zero());
}

#[test]
fn a_v1alpha1_edit_of_a_narrowed_value_wins_over_the_kept_one() {
    let mut alpha = convert(scaled_to_zero(), V1ALPHA1);
    alpha["spec"]["autoscaling"]["minReplicas"] = json!(2);
    let back = convert(alpha, V1BETA1);
    assert_eq!(back["spec"]["autoscaling"]["minReplicas"], 2);
    assert_eq!(back["spec"]["autoscaling"]["engine"], "KEDA");
}

#[test]
fn a_hand_edited_annotation_never_makes_an_object_unreadable() {
    let mut alpha = convert(sglang(), V1ALPHA1);
    alpha["metadata"]["annotations"][FIELDS_ANNOTATION] = json!("not json");
    let back = convert(alpha, V1BETA1);
    assert!(back["spec"]["runtime"].get("preset").is_none());
    assert!(back["metadata"].get("annotations").is_none());
}

/// The forged create of issue 24: the annotation named another image and
/// 5000 canary replicas. The image is v1alpha1's to say, so it comes from
/// the v1alpha1 spec; the canary is v1beta1-only, so it comes back, and the
/// webhook refuses it against the schema (see `tests/webhook.rs`).
#[test]
fn the_annotation_never_overrides_a_field_v1alpha1_has() {
    let forged = json!({"apiVersion": V1ALPHA1, "kind": "ModelService",
        "metadata": {"name": "forged", "annotations": {FIELDS_ANNOTATION:
            r#"{"runtime":{"image":"evil.example.com/x:1","preset":"vllm"},"model":{"name":"evil"},"replicas":99,"resources":{"gpus":16},"autoscaling":{"maxReplicas":100}}"#}},
        "spec": {"model": "good", "image": "good.example.com/x:1", "replicas": 2, "gpus": 1}});
    let beta = convert(forged, V1BETA1);
    assert_eq!(beta["spec"]["runtime"]["image"], "good.example.com/x:1");
    assert_eq!(beta["spec"]["model"]["name"], "good");
    assert_eq!(beta["spec"]["replicas"], 2);
    assert_eq!(beta["spec"]["resources"]["gpus"], 1);
    assert!(
        beta["spec"].get("autoscaling").is_none(),
        "no autoscaling in v1alpha1, none from the annotation"
    );
    assert_eq!(
        beta["spec"]["runtime"]["preset"], "vllm",
        "what v1alpha1 cannot say still comes back"
    );
}

/// The same forged create, as the webhook answers the API server: the
/// canary's 5000 replicas break the v1 (storage) schema, and the review fails
/// with a message naming the field, so nothing is stored.
#[test]
fn the_webhook_refuses_a_conversion_whose_result_breaks_the_storage_schema() {
    let forged = json!({"apiVersion": V1ALPHA1, "kind": "ModelService",
        "metadata": {"name": "forged", "namespace": "ml", "annotations": {FIELDS_ANNOTATION:
            r#"{"rollout":{"canary":{"replicas":5000}}}"#}},
        "spec": {"model": "good", "image": "good.example.com/x:1"}});
    let review = |object: Value| {
        let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": V1, "objects": [object]}});
        modelservice_operator::webhook::review::handle(
            body.to_string().as_bytes(),
            modelservice_operator::core::convert::convert_checked,
        )
    };
    let answer = review(forged.clone());
    assert_eq!(answer["response"]["result"]["status"], "Failure");
    let message = answer["response"]["result"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("spec.rollout.canary.replicas"),
        "{message}"
    );
    assert!(answer["response"].get("convertedObjects").is_none());

    let mut honest = forged;
    honest["metadata"]["annotations"][FIELDS_ANNOTATION] =
        json!(r#"{"rollout":{"canary":{"replicas":5}}}"#);
    let answer = review(honest);
    assert_eq!(answer["response"]["result"]["status"], "Success");
    assert_eq!(
        answer["response"]["convertedObjects"][0]["spec"]["rollout"]["canary"]["replicas"],
        5
    );
}

/// KEDA's knobs: flat in v1beta1, in `autoscaling.keda` in v1, in the
/// annotation in v1alpha1 (with the engine and the real minReplicas).
fn keda_beta() -> Value {
    json!({"apiVersion": V1BETA1, "kind": "ModelService", "metadata": {"name": "m", "namespace": "ml"},
        "spec": {"model": {"name": "qwen"}, "runtime": {"image": "vllm:1"}, "rollout": {"surge": "Never"},
            "autoscaling": {"engine": "KEDA", "minReplicas": 0, "maxReplicas": 3,
                "prometheus": {"address": "http://prom:9090"}, "cooldownSeconds": 60}}})
}

#[test]
fn keda_knobs_move_between_autoscaling_and_autoscaling_keda() {
    let v1 = convert(keda_beta(), V1);
    assert_eq!(
        v1["spec"]["autoscaling"],
        json!({"engine": "KEDA", "minReplicas": 0, "maxReplicas": 3,
            "keda": {"prometheus": {"address": "http://prom:9090"}, "cooldownSeconds": 60}})
    );
    let alpha = convert(v1.clone(), V1ALPHA1);
    assert_eq!(
        alpha["spec"]["autoscaling"],
        json!({"minReplicas": 1, "maxReplicas": 3})
    );
    assert_eq!(
        alpha["metadata"]["annotations"][FIELDS_ANNOTATION],
        r#"{"autoscaling":{"engine":"KEDA","keda":{"cooldownSeconds":60,"prometheus":{"address":"http://prom:9090"}},"minReplicas":0}}"#,
        "kept in the v1 shape"
    );
    assert_eq!(convert(alpha.clone(), V1BETA1), keda_beta());
    assert_eq!(convert(alpha, V1), v1);
}

/// A v1alpha1 client that read an object from the v1beta1 release holds
/// its kept fields in the v1beta1 shape, under the old annotation name.
/// Sent back after the upgrade, they still come back, in v1's shape, and
/// still never override what v1alpha1 says.
#[test]
fn the_v1beta1_release_annotation_is_still_read() {
    let from_the_old_release = json!({"apiVersion": V1ALPHA1, "kind": "ModelService",
        "metadata": {"name": "m", "namespace": "ml", "annotations": {LEGACY_FIELDS_ANNOTATION:
            r#"{"autoscaling":{"engine":"KEDA","minReplicas":0,"cooldownSeconds":60},"runtime":{"preset":"sglang","image":"evil:1"},"rollout":{"surge":null}}"#}},
        "spec": {"model": "qwen", "image": "vllm:1", "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}});
    let v1 = convert(from_the_old_release, V1);
    assert_eq!(
        v1["spec"],
        json!({"model": {"name": "qwen"}, "runtime": {"image": "vllm:1", "preset": "sglang"},
            "autoscaling": {"engine": "KEDA", "minReplicas": 0, "maxReplicas": 3,
                "keda": {"cooldownSeconds": 60}}})
    );
    assert!(v1["metadata"].get("annotations").is_none(), "{v1}");
    assert_eq!(schema_errors(&v1), Vec::<String>::new());
}

/// The API server never puts a kept-fields annotation on a v1 object; one
/// written there by hand is dropped on the way to an older version, where it
/// would otherwise come back as fields.
#[test]
fn a_kept_fields_annotation_on_a_v1_object_means_nothing() {
    let v1 = json!({"apiVersion": V1, "kind": "ModelService",
        "metadata": {"name": "m", "annotations": {FIELDS_ANNOTATION: r#"{"route":{"path":"/x"}}"#, "team": "ml"}},
        "spec": {"model": {"name": "m"}, "runtime": {"image": "i"}, "rollout": {"surge": "Never"}}});
    for to in [V1BETA1, V1ALPHA1] {
        let older = convert(v1.clone(), to);
        assert_eq!(
            older["metadata"]["annotations"],
            json!({"team": "ml"}),
            "{to}"
        );
        assert!(convert(older, V1)["spec"].get("route").is_none(), "{to}");
    }
}

#[test]
fn odd_stored_objects_still_convert() {
    let odd = json!({"apiVersion": V1ALPHA1, "kind": "ModelService", "metadata": {"name": "m"},
        "spec": {"model": 5, "gpus": "two", "resources": "big"}});
    let beta = convert(odd.clone(), V1BETA1);
    assert_eq!(beta["spec"]["model"]["name"], 5);
    assert_eq!(beta["spec"]["resources"]["gpus"], "two");
    let no_spec =
        json!({"apiVersion": V1ALPHA1, "kind": "ModelService", "metadata": {"name": "m"}});
    assert_eq!(
        convert(no_spec, V1BETA1)["spec"],
        json!({"rollout": {"surge": "Never"}})
    );
}

#[test]
fn a_v1alpha1_object_never_surges_and_a_v1beta1_surge_policy_survives_v1alpha1() {
    let alpha = json!({"apiVersion": V1ALPHA1, "kind": "ModelService", "metadata": {"name": "m"},
        "spec": {"model": "m", "image": "i"}});
    let beta = convert(alpha.clone(), V1BETA1);
    assert_eq!(beta["spec"]["rollout"], json!({"surge": "Never"}));
    assert_eq!(
        convert(beta, V1ALPHA1),
        alpha,
        "Never is what v1alpha1 means"
    );
    for surge in [json!("Auto"), json!("Never")] {
        let mut b = sglang();
        b["spec"]["rollout"] = json!({"surge": surge});
        assert_eq!(convert(convert(b.clone(), V1ALPHA1), V1BETA1), b);
    }
}

#[test]
fn unknown_versions_are_refused_with_a_reason() {
    assert_eq!(
        convert_object(sglang(), "serving.modelservice.dev/v2"),
        Err(ConversionError::UnknownTarget(
            "serving.modelservice.dev/v2".into()
        ))
    );
    let mut other = sglang();
    other["apiVersion"] = json!("serving.modelservice.dev/v0");
    assert!(matches!(
        convert_object(other, V1ALPHA1),
        Err(ConversionError::UnknownSource(_))
    ));
    assert_eq!(
        convert_object(json!([1]), V1ALPHA1),
        Err(ConversionError::NotAnObject)
    );
    assert_eq!(
        convert(sglang(), V1BETA1),
        sglang(),
        "same version: unchanged"
    );
    for served in modelservice_operator::core::convert::SERVED {
        assert!(convert_object(sglang(), served).is_ok(), "{served}");
    }
}

/// `tests/golden/` holds what `render` printed for each v1alpha1 sample at
/// the last commit before v1beta1. Converted and built by this release
/// against the Deployment that release made (as after an operator upgrade),
/// the children must be the same to the byte: a changed pod template would
/// restart every model when the operator is upgraded. (A new object's stable
/// pods carry the track label; one made before tracks gets it only at its
/// next rollout: see `core::tracks::stable_labelled`.)
#[test]
fn v1alpha1_objects_get_exactly_the_children_the_previous_release_built() {
    use modelservice_operator::core::{Prior, plan, validate};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("config/samples/v1alpha1")).expect("samples") {
        let path = entry.expect("entry").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        if stem == "kustomization" {
            continue;
        }
        let golden =
            std::fs::read_to_string(root.join(format!("tests/golden/{stem}.children.yaml")))
                .unwrap_or_else(|e| panic!("golden file for {stem}: {e}"));
        let made: Value = serde_yaml::Deserializer::from_str(&golden)
            .map(|d| serde::Deserialize::deserialize(d).expect("golden doc"))
            .find(|d: &Value| d["kind"] == "Deployment")
            .expect("a Deployment in the golden file");
        let alpha: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).expect("sample"))
            .expect("sample yaml");
        let ms: api::ModelService =
            serde_json::from_value(convert(alpha, V1)).expect("a v1 object");
        let valid = validate(&ms, "ml").expect("valid");
        let prior = Prior {
            stable_template: Some(made["spec"]["template"].clone()),
            ..Prior::offline()
        };
        let built = plan(&valid, None, &prior).children.to_yaml().expect("yaml");
        assert_eq!(built, golden, "{stem}");
        let fresh = render(&serde_yaml::to_string(&ms).expect("yaml"), "ml").expect("renders");
        assert!(
            fresh.contains("serving.modelservice.dev/track: stable"),
            "{stem}: a new object's pods carry the track"
        );
        checked += 1;
    }
    assert!(checked >= 4, "{checked} samples checked");
}
