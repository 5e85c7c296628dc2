//! The desired Service: a stable in-cluster address for the model.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ValidSpec;
use super::deployment::PORT_NAME;
use super::labels::{child_meta, selector_labels};
use crate::api::lws::labels::WORKER_INDEX;

/// Builds the ClusterIP Service for `v`. `leaders_only`: the replicas are
/// groups, and only a group's leader serves (workers also have no `http`
/// port, so even a Service that selects them never sends them a request).
pub fn build(v: &ValidSpec, owner: Option<&OwnerReference>, leaders_only: bool) -> Service {
    let mut selector = selector_labels(&v.name);
    if leaders_only {
        selector.insert(WORKER_INDEX.to_string(), "0".to_string());
    }
    Service {
        metadata: child_meta(v, owner),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.into()),
                port: v.spec.runtime.port,
                target_port: Some(IntOrString::String(PORT_NAME.into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The in-cluster URL users call, as reported in `status.url`.
pub fn url(v: &ValidSpec) -> String {
    format!(
        "http://{}.{}.svc:{}",
        v.name, v.namespace, v.spec.runtime.port
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::children::tests::valid;

    #[test]
    fn service_exposes_the_named_port_and_selects_the_pods() {
        let mut v = valid();
        v.spec.runtime.port = 9000;
        let s = build(&v, None, false).spec.expect("spec");
        assert_eq!(s.type_.as_deref(), Some("ClusterIP"));
        let p = &s.ports.expect("ports")[0];
        assert_eq!(p.port, 9000);
        assert_eq!(p.name.as_deref(), Some("http"));
        assert_eq!(p.target_port, Some(IntOrString::String("http".into())));
        assert_eq!(s.selector, Some(selector_labels("llama")));
    }

    #[test]
    fn url_names_service_namespace_and_port() {
        assert_eq!(url(&valid()), "http://llama.ml.svc:8000");
    }
}
