//! The desired HorizontalPodAutoscaler, present only when autoscaling is set.
//!
//! A Pods metric with an AverageValue target of T makes the HPA keep
//! replicas = ceil(total queue / T) within [minReplicas, maxReplicas].

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
    MetricIdentifier, MetricSpec, MetricTarget, PodsMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::ValidSpec;
use super::labels::child_meta;
use crate::api::Engine;

/// Builds the HPA for `v`, or `None` when autoscaling is off or another
/// engine scales.
pub fn build(v: &ValidSpec, owner: Option<&OwnerReference>) -> Option<HorizontalPodAutoscaler> {
    let a = v
        .spec
        .autoscaling
        .as_ref()
        .filter(|a| a.engine() == Engine::Hpa)?;
    Some(HorizontalPodAutoscaler {
        metadata: child_meta(v, owner),
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: {
                let (api_version, kind) = scale_target(v);
                CrossVersionObjectReference {
                    api_version: Some(api_version),
                    kind,
                    name: v.name.clone(),
                }
            },
            min_replicas: Some(a.min_replicas),
            max_replicas: a.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Pods".into(),
                pods: Some(PodsMetricSource {
                    metric: MetricIdentifier {
                        name: a.metric.clone(),
                        selector: None,
                    },
                    target: MetricTarget {
                        type_: "AverageValue".into(),
                        average_value: Some(Quantity(a.target_queue_length.to_string())),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            behavior: None,
        },
        status: None,
    })
}

/// What an autoscaler scales: the Deployment, or the LeaderWorkerSet
/// (through its scale subresource, in groups) when the replicas are groups.
/// (apiVersion, kind).
pub fn scale_target(v: &ValidSpec) -> (String, String) {
    if v.spec.pipeline() > 1 {
        (
            format!("{}/{}", crate::api::lws::GROUP, crate::api::lws::VERSION),
            crate::api::lws::KIND.into(),
        )
    } else {
        ("apps/v1".into(), "Deployment".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::children::tests::valid;

    #[test]
    fn no_hpa_without_autoscaling() {
        let mut v = valid();
        v.spec.autoscaling = None;
        assert!(build(&v, None).is_none());
    }

    #[test]
    fn hpa_targets_the_deployment_on_the_queue_metric() {
        let h = build(&valid(), None).expect("hpa");
        let s = h.spec;
        assert_eq!(s.scale_target_ref.kind, "Deployment");
        assert_eq!(s.scale_target_ref.name, "llama");
        assert_eq!(s.scale_target_ref.api_version.as_deref(), Some("apps/v1"));
        assert_eq!((s.min_replicas, s.max_replicas), (Some(1), 8));
        let m = &s.metrics.expect("metrics")[0];
        assert_eq!(m.type_, "Pods");
        let pods = m.pods.as_ref().expect("pods metric");
        assert_eq!(pods.metric.name, "vllm:num_requests_waiting");
        assert_eq!(pods.target.type_, "AverageValue");
        assert_eq!(pods.target.average_value, Some(Quantity("5".into())));
    }
}
