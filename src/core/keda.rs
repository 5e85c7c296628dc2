//! The desired KEDA ScaledObject, present only with `autoscaling.engine: KEDA`.
//!
//! Its Prometheus trigger sums `metric` over this ModelService's pods and
//! asks for one replica per `targetQueueLength` waiting requests, as the HPA
//! engine does, so switching engines keeps the scaling rule. The pods are
//! matched by the `namespace` and `pod` labels Prometheus puts on scraped
//! series, with the pattern of the stable Deployment's pod names (see
//! [`pod_pattern`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::ValidSpec;
use super::labels::child_meta;
use crate::api::Engine;
use crate::api::keda::{ScaleTargetRef, ScaledObject, ScaledObjectSpec, Trigger};

/// KEDA's own default: seconds between two reads of the trigger.
pub const DEFAULT_POLLING_SECONDS: i32 = 30;
/// KEDA's own default: seconds of an idle queue before scaling to zero.
pub const DEFAULT_COOLDOWN_SECONDS: i32 = 300;

/// Builds the ScaledObject for `v`, or `None` unless KEDA scales it.
pub fn build(v: &ValidSpec, owner: Option<&OwnerReference>) -> Option<ScaledObject> {
    let a = v
        .spec
        .autoscaling
        .as_ref()
        .filter(|a| a.engine() == Engine::Keda)?;
    let metadata = BTreeMap::from([
        (
            "serverAddress".to_string(),
            v.prometheus_address.clone().unwrap_or_default(),
        ),
        (
            "query".to_string(),
            query(&a.metric, &v.namespace, &serving_pods(v)),
        ),
        ("threshold".to_string(), a.target_queue_length.to_string()),
        (
            "activationThreshold".to_string(),
            a.keda().activation_queue_length.unwrap_or(0).to_string(),
        ),
    ]);
    Some(ScaledObject::new(
        child_meta(v, owner),
        ScaledObjectSpec {
            scale_target_ref: {
                let (api_version, kind) = super::hpa::scale_target(v);
                ScaleTargetRef {
                    api_version,
                    kind,
                    name: v.name.clone(),
                }
            },
            min_replica_count: a.min_replicas,
            max_replica_count: a.max_replicas,
            polling_interval: a.keda().polling_seconds.unwrap_or(DEFAULT_POLLING_SECONDS),
            cooldown_period: a
                .keda()
                .cooldown_seconds
                .unwrap_or(DEFAULT_COOLDOWN_SECONDS),
            triggers: vec![Trigger {
                type_: "prometheus".into(),
                metric_type: Some("AverageValue".into()),
                metadata,
            }],
        },
    ))
}

/// The PromQL that sums `metric` over the pods whose names match `pods`
/// (see [`serving_pods`]). `metric` is a metric name (the
/// schema keeps it non-empty); a name with characters PromQL does not allow
/// in a bare name (vLLM's colons are allowed) is quoted into the selector
/// instead.
pub fn query(metric: &str, namespace: &str, pods: &str) -> String {
    let selector = format!(
        "namespace=\"{}\",pod=~\"{}\"",
        escape(namespace),
        escape(pods)
    );
    if is_bare_metric_name(metric) {
        format!("sum({metric}{{{selector}}})")
    } else {
        format!("sum({{__name__=\"{}\",{selector}}})", escape(metric))
    }
}

/// The pattern of the pods that serve `v`'s requests: the Deployment's
/// pods, or with groups the leaders, which LWS's StatefulSet names
/// `<name>-<group>` (a worker's name has one more `-<index>`, which the
/// anchored pattern refuses).
pub fn serving_pods(v: &ValidSpec) -> String {
    if v.spec.pipeline() > 1 {
        format!("{}-[0-9]+", v.name)
    } else {
        pod_pattern(&v.name)
    }
}

/// The longest `generateName` prefix the API server keeps: it adds 5
/// random characters to at most 58 (63 in all).
const GENERATED_PREFIX: usize = 58;
/// The random suffix of a generated name.
const RANDOM: usize = 5;
/// A ReplicaSet's pod-template-hash: a 32-bit hash, 1 to 10 characters.
const HASH: usize = 10;

/// The names of the pods of Deployment `deployment`, as a PromQL (RE2)
/// pattern, which Prometheus anchors at both ends.
///
/// The ReplicaSet controller names a pod `generateName` + 5 random
/// characters, with `generateName` = `<deployment>-<hash>-` cut to 58
/// characters. So for a name up to 46 characters the pod is
/// `<name>-<hash>-<5>`, and a longer name loses the end of its hash, its
/// last dash, or (from 58 characters) the end of the name itself: a pattern
/// that ignored the cut matched no pod, and KEDA read 0 for such a model
/// for ever. For names up to 46 characters the pattern matches no other
/// Deployment's pods (a `<name>-canary` or `<name>-x` Deployment's pods have
/// a dash where it wants the hash or the random part). Beyond that the cut
/// pod names carry too little to tell every other Deployment apart (see
/// docs/autoscaling.md).
pub fn pod_pattern(deployment: &str) -> String {
    let n = deployment.len();
    let tail = format!("[a-z0-9]{{{RANDOM}}}");
    if n >= GENERATED_PREFIX {
        let kept = deployment.get(..GENERATED_PREFIX).unwrap_or(deployment);
        return format!("{kept}{tail}");
    }
    // Room for the hash before the cut, with and without the last dash.
    let whole = (GENERATED_PREFIX - n).saturating_sub(2).min(HASH);
    let cut = GENERATED_PREFIX - n - 1;
    let mut shapes = Vec::new();
    if whole >= 1 {
        shapes.push(format!("[a-z0-9]{{1,{whole}}}-"));
    }
    if cut <= HASH {
        shapes.push(if cut == 0 {
            String::new()
        } else {
            format!("[a-z0-9]{{{cut}}}")
        });
    }
    match shapes.as_slice() {
        [one] => format!("{deployment}-{one}{tail}"),
        _ => format!("{deployment}-(?:{}){tail}", shapes.join("|")),
    }
}

fn is_bare_metric_name(m: &str) -> bool {
    let mut chars = m.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Engine, KedaOptions, PrometheusSource};
    use crate::core::children::tests::valid;

    fn keda() -> ValidSpec {
        let mut v = valid();
        if let Some(a) = v.spec.autoscaling.as_mut() {
            a.engine = Some(Engine::Keda);
            a.min_replicas = 0;
            a.keda = Some(KedaOptions {
                prometheus: Some(PrometheusSource {
                    address: "http://prom:9090".into(),
                }),
                ..KedaOptions::default()
            });
        }
        v.prometheus_address = Some("http://prom:9090".into());
        v
    }

    #[test]
    fn only_the_keda_engine_gets_a_scaled_object_and_only_hpa_an_hpa() {
        assert!(build(&valid(), None).is_none());
        assert!(crate::core::hpa::build(&valid(), None).is_some());
        assert!(build(&keda(), None).is_some());
        assert!(crate::core::hpa::build(&keda(), None).is_none());
        let mut off = keda();
        off.spec.autoscaling = None;
        assert!(build(&off, None).is_none());
    }

    #[test]
    fn the_scaled_object_targets_the_deployment_with_the_bounds_and_trigger() {
        let so = build(&keda(), None).expect("scaled object");
        assert_eq!(so.api_version, "keda.sh/v1alpha1");
        assert_eq!(so.kind, "ScaledObject");
        assert_eq!(so.metadata.name.as_deref(), Some("llama"));
        let s = so.spec;
        assert_eq!(
            (
                s.scale_target_ref.kind.as_str(),
                s.scale_target_ref.name.as_str()
            ),
            ("Deployment", "llama")
        );
        assert_eq!((s.min_replica_count, s.max_replica_count), (0, 8));
        assert_eq!(
            (s.polling_interval, s.cooldown_period),
            (DEFAULT_POLLING_SECONDS, DEFAULT_COOLDOWN_SECONDS)
        );
        let t = &s.triggers[0];
        assert_eq!(t.type_, "prometheus");
        let m = |k: &str| t.metadata.get(k).cloned().unwrap_or_default();
        assert_eq!(m("serverAddress"), "http://prom:9090");
        assert_eq!(
            m("query"),
            r#"sum(vllm:num_requests_waiting{namespace="ml",pod=~"llama-[a-z0-9]{1,10}-[a-z0-9]{5}"})"#
        );
        assert_eq!(
            (m("threshold"), m("activationThreshold")),
            ("5".into(), "0".into())
        );
    }

    #[test]
    fn cooldown_polling_and_activation_come_from_the_spec_when_set() {
        let mut v = keda();
        if let Some(a) = v.spec.autoscaling.as_mut() {
            let k = a.keda.get_or_insert_default();
            k.cooldown_seconds = Some(60);
            k.polling_seconds = Some(5);
            k.activation_queue_length = Some(2);
        }
        let s = build(&v, None).expect("scaled object").spec;
        assert_eq!((s.polling_interval, s.cooldown_period), (5, 60));
        assert_eq!(
            s.triggers[0]
                .metadata
                .get("activationThreshold")
                .map(String::as_str),
            Some("2")
        );
    }

    /// What the ReplicaSet controller names a pod of `deployment` whose
    /// template hash is `hash`, with `random` as the 5 random characters.
    fn pod_name(deployment: &str, hash: &str, random: &str) -> String {
        let prefix = format!("{deployment}-{hash}-");
        format!("{}{random}", &prefix[..prefix.len().min(GENERATED_PREFIX)])
    }

    fn matches(pattern: &str, pod: &str) -> bool {
        regex::Regex::new(&format!("^(?:{pattern})$"))
            .expect("the pattern compiles")
            .is_match(pod)
    }

    /// The bug: for a 58-character name the pods are `<first 58><5>`, which
    /// `<name>-[a-z0-9]+-[a-z0-9]+` never matched, so KEDA read 0.
    #[test]
    fn the_pattern_matches_the_pods_of_every_legal_name_length() {
        for n in 1..=63 {
            let name: String = "a".repeat(n);
            let pattern = pod_pattern(&name);
            for hash in ["5", "7d4b9c", "5d8f7c9b6d", "6b9f8c7d54"] {
                let pod = pod_name(&name, hash, "x2k9q");
                assert!(matches(&pattern, &pod), "{n}: {pattern} misses {pod}");
            }
        }
    }

    #[test]
    fn up_to_46_characters_the_canary_and_other_models_are_told_apart() {
        for n in 1..=46 {
            let name: String = "b".repeat(n);
            let pattern = pod_pattern(&name);
            for other in [
                format!("{name}-canary"),
                format!("{name}-x"),
                format!("{name}x"),
            ] {
                for hash in ["5", "7d4b9c", "5d8f7c9b6d"] {
                    let pod = pod_name(&other, hash, "x2k9q");
                    assert!(!matches(&pattern, &pod), "{n}: {pattern} matches {pod}");
                }
            }
        }
    }

    #[test]
    fn a_metric_that_is_not_a_bare_name_is_quoted() {
        assert_eq!(
            query("queue depth", "ns", &pod_pattern("m")),
            r#"sum({__name__="queue depth",namespace="ns",pod=~"m-[a-z0-9]{1,10}-[a-z0-9]{5}"})"#
        );
    }

    #[test]
    fn groups_are_scaled_through_their_leader_worker_set_and_counted_by_leaders() {
        let mut v = valid();
        v.spec.autoscaling = Some(Box::new(crate::api::Autoscaling {
            engine: Some(crate::api::Engine::Keda),
            ..*v.spec.autoscaling.clone().expect("the sample autoscales")
        }));
        v.prometheus_address = Some("http://prom:9090".into());
        v.spec.parallelism = Some(crate::api::Parallelism {
            tensor: None,
            pipeline: 2,
        });
        let so = build(&v, None).expect("a ScaledObject");
        assert_eq!(so.spec.scale_target_ref.kind, "LeaderWorkerSet");
        assert_eq!(
            so.spec.scale_target_ref.api_version,
            "leaderworkerset.x-k8s.io/v1"
        );
        let q = &so.spec.triggers[0].metadata["query"];
        assert!(q.contains(r#"pod=~"llama-[0-9]+""#), "{q}");
        // Leaders are <name>-<group>; workers have one more -<index>, and
        // the canary's leaders are <name>-canary-<group>.
        let pattern = serving_pods(&v);
        assert!(matches(&pattern, "llama-0") && matches(&pattern, "llama-12"));
        assert!(!matches(&pattern, "llama-0-1"));
        assert!(!matches(&pattern, "llama-canary-0"));
    }
}
