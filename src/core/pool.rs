//! The desired InferencePools, present only with `route.backend:
//! InferencePool`: the model's pods behind an endpoint picker, one pool per
//! track so that a route can weigh the tracks.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::ValidSpec;
use super::endpoint_picker::{self, GRPC_PORT};
use super::labels::{child_meta, selector_labels};
use super::tracks::TRACK_LABEL;
use crate::api::inference::{
    EndpointPickerRef, InferencePool, InferencePoolSpec, LabelSelector, Port,
};
use crate::api::lws::labels::WORKER_INDEX;
use crate::api::{FailureMode, RouteBackend};

/// Whether `v` routes through InferencePools.
pub fn wanted(v: &ValidSpec) -> bool {
    v.spec
        .route
        .as_ref()
        .is_some_and(|r| r.backend() == RouteBackend::InferencePool)
}

/// The pool `name` over the pods with `track` (all of the model's pods
/// when `None`), on the runtime port, behind its own endpoint picker.
pub fn build(
    v: &ValidSpec,
    name: &str,
    track: Option<&str>,
    owner: Option<&OwnerReference>,
) -> InferencePool {
    let mut labels: BTreeMap<String, String> = selector_labels(&v.name);
    if let Some(t) = track {
        labels.insert(TRACK_LABEL.to_string(), t.to_string());
    }
    // Only a group's leader serves.
    if v.spec.pipeline() > 1 {
        labels.insert(WORKER_INDEX.to_string(), "0".to_string());
    }
    let failure_mode = match v.spec.route.as_ref().map(|r| r.failure_mode()) {
        Some(FailureMode::FailOpen) => "FailOpen",
        _ => "FailClose",
    };
    let mut meta = child_meta(v, owner);
    meta.name = Some(name.to_string());
    InferencePool::new(
        meta,
        InferencePoolSpec {
            selector: LabelSelector {
                match_labels: labels,
            },
            target_ports: vec![Port {
                number: v.spec.runtime.port,
            }],
            endpoint_picker_ref: EndpointPickerRef {
                name: endpoint_picker::picker_name(name),
                port: Port { number: GRPC_PORT },
                failure_mode: failure_mode.into(),
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{InferencePoolOptions, ParentReference, Route};
    use crate::core::children::tests::valid;
    use serde_json::json;

    pub fn pooled() -> ValidSpec {
        let mut v = valid();
        v.spec.route = Some(Box::new(Route {
            parent_refs: vec![ParentReference {
                name: "gw".into(),
                namespace: None,
                section_name: None,
                port: None,
                group: None,
                kind: None,
            }],
            hostnames: vec![],
            path: "/".into(),
            backend: Some(RouteBackend::InferencePool),
            inference_pool: None,
        }));
        v
    }

    #[test]
    fn the_pool_selects_the_model_pods_on_the_runtime_port() {
        let mut v = pooled();
        v.spec.runtime.port = 9000;
        let p = serde_json::to_value(build(&v, "llama", None, None)).expect("json");
        assert_eq!(p["apiVersion"], "inference.networking.k8s.io/v1");
        assert_eq!(p["kind"], "InferencePool");
        assert_eq!(
            p["spec"],
            json!({
                "selector": {"matchLabels": {
                    "app.kubernetes.io/instance": "llama",
                    "app.kubernetes.io/name": "modelservice"}},
                "targetPorts": [{"number": 9000}],
                "endpointPickerRef": {"name": "llama-epp", "port": {"number": 9002},
                    "failureMode": "FailClose"}
            })
        );
        assert!(wanted(&v));
        assert!(!wanted(&valid()));
    }

    #[test]
    fn a_track_pool_selects_its_track_and_the_failure_mode_is_the_users() {
        let mut v = pooled();
        if let Some(r) = v.spec.route.as_mut() {
            r.inference_pool = Some(InferencePoolOptions {
                failure_mode: FailureMode::FailOpen,
            });
        }
        let p = build(&v, "llama-canary", Some("canary"), None);
        assert_eq!(
            p.spec
                .selector
                .match_labels
                .get(TRACK_LABEL)
                .map(String::as_str),
            Some("canary")
        );
        assert_eq!(p.spec.endpoint_picker_ref.name, "llama-canary-epp");
        assert_eq!(p.spec.endpoint_picker_ref.failure_mode, "FailOpen");
    }
}
