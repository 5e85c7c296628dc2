//! The desired KEDA ScaledObject, present only with `autoscaling.engine: KEDA`.
//!
//! Its Prometheus trigger sums `metric` over this ModelService's pods and
//! asks for one replica per `targetQueueLength` waiting requests, as the HPA
//! engine does, so switching engines keeps the scaling rule. The pods are
//! matched by the `namespace` and `pod` labels Prometheus puts on scraped
//! series; the pod pattern is the Deployment's pod names (`<name>-<hash>-<id>`),
//! which no other ModelService's pods match (a `<name>-canary` Deployment's
//! pods have one dash-separated part more).

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
        ("query".to_string(), query(&a.metric, &v.namespace, &v.name)),
        ("threshold".to_string(), a.target_queue_length.to_string()),
        (
            "activationThreshold".to_string(),
            a.activation_queue_length.unwrap_or(0).to_string(),
        ),
    ]);
    Some(ScaledObject::new(
        child_meta(v, owner),
        ScaledObjectSpec {
            scale_target_ref: ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: v.name.clone(),
            },
            min_replica_count: a.min_replicas,
            max_replica_count: a.max_replicas,
            polling_interval: a.polling_seconds.unwrap_or(DEFAULT_POLLING_SECONDS),
            cooldown_period: a.cooldown_seconds.unwrap_or(DEFAULT_COOLDOWN_SECONDS),
            triggers: vec![Trigger {
                type_: "prometheus".into(),
                metric_type: Some("AverageValue".into()),
                metadata,
            }],
        },
    ))
}

/// The PromQL that sums `metric` over the pods of ModelService `name`.
/// `metric` is a metric name (the schema keeps it non-empty); a name with
/// characters PromQL does not allow in a bare name (vLLM's colons are
/// allowed) is quoted into the selector instead.
pub fn query(metric: &str, namespace: &str, name: &str) -> String {
    let selector = format!(
        "namespace=\"{}\",pod=~\"{}-[a-z0-9]+-[a-z0-9]+\"",
        escape(namespace),
        escape(name)
    );
    if is_bare_metric_name(metric) {
        format!("sum({metric}{{{selector}}})")
    } else {
        format!("sum({{__name__=\"{}\",{selector}}})", escape(metric))
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
    use crate::api::{Engine, PrometheusSource};
    use crate::core::children::tests::valid;

    fn keda() -> ValidSpec {
        let mut v = valid();
        if let Some(a) = v.spec.autoscaling.as_mut() {
            a.engine = Some(Engine::Keda);
            a.min_replicas = 0;
            a.prometheus = Some(PrometheusSource {
                address: "http://prom:9090".into(),
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
            r#"sum(vllm:num_requests_waiting{namespace="ml",pod=~"llama-[a-z0-9]+-[a-z0-9]+"})"#
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
            a.cooldown_seconds = Some(60);
            a.polling_seconds = Some(5);
            a.activation_queue_length = Some(2);
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

    #[test]
    fn a_metric_that_is_not_a_bare_name_is_quoted() {
        assert_eq!(
            query("queue depth", "ns", "m"),
            r#"sum({__name__="queue depth",namespace="ns",pod=~"m-[a-z0-9]+-[a-z0-9]+"})"#
        );
    }
}
