//! Keeps the CRD's `spec.conversion` pointing at this webhook with our CA as
//! `caBundle`, so that `kubectl apply` of the CRD followed by `run` is all a
//! user does (API.md). Without it the API server could not call the webhook
//! at all, or would not trust its certificate.
//!
//! Every replica runs this with the same Secret, so they all want the same
//! value: the CRD is read first and written only when it differs, and a
//! write is a JSON merge patch of `spec.conversion` alone (nothing else of
//! the CRD, which its installer owns, is touched).

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::api::Patch;
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::info;

use super::ClientConfigTarget;

/// The path the webhook serves conversion on (the CRD's manifests name it too).
pub use crate::api::WEBHOOK_PATH as CONVERT_PATH;

/// What [`reconcile`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The CRD already pointed at us with our CA; nothing was written.
    Unchanged,
    /// `spec.conversion` was written.
    Updated,
    /// The CRD does not exist (yet); try again later.
    CrdMissing,
}

/// The `clientConfig` that reaches `target` and trusts `ca_bundle_pem`.
pub fn desired(target: &ClientConfigTarget, ca_bundle_pem: &str) -> WebhookClientConfig {
    let ca_bundle = Some(ByteString(ca_bundle_pem.as_bytes().to_vec()));
    match target {
        ClientConfigTarget::Url(url) => WebhookClientConfig {
            url: Some(url.clone()),
            service: None,
            ca_bundle,
        },
        ClientConfigTarget::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            url: None,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(CONVERT_PATH.into()),
                port: Some(i32::from(*port)),
            }),
            ca_bundle,
        },
    }
}

/// Whether `conversion` is the webhook strategy with v1 reviews and exactly
/// `wanted` as its clientConfig.
pub fn up_to_date(
    conversion: Option<&CustomResourceConversion>,
    wanted: &WebhookClientConfig,
) -> bool {
    let Some(c) = conversion else { return false };
    let Some(webhook) = &c.webhook else {
        return false;
    };
    c.strategy == "Webhook"
        && webhook.conversion_review_versions == ["v1"]
        && webhook.client_config.as_ref() == Some(wanted)
}

/// The merge patch that sets `spec.conversion` to `wanted`. The unused one of
/// `url` and `service` is set to null: a merge would otherwise keep it, and
/// the API server rejects a clientConfig with both.
pub fn patch(wanted: &WebhookClientConfig) -> Value {
    let conversion = CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            client_config: Some(wanted.clone()),
            conversion_review_versions: vec!["v1".into()],
        }),
    };
    let mut value = serde_json::to_value(&conversion).unwrap_or(Value::Null);
    if let Some(cc) = value
        .pointer_mut("/webhook/clientConfig")
        .and_then(Value::as_object_mut)
    {
        cc.entry("url").or_insert(Value::Null);
        cc.entry("service").or_insert(Value::Null);
    }
    json!({"spec": {"conversion": value}})
}

/// Reads CRD `crd_name` and, when its conversion does not point at `target`
/// with `ca_bundle_pem`, patches it.
pub async fn reconcile(
    client: &Client,
    crd_name: &str,
    target: &ClientConfigTarget,
    ca_bundle_pem: &str,
) -> Result<Outcome, kube::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = api.get_opt(crd_name).await? else {
        return Ok(Outcome::CrdMissing);
    };
    let wanted = desired(target, ca_bundle_pem);
    if up_to_date(crd.spec.conversion.as_ref(), &wanted) {
        return Ok(Outcome::Unchanged);
    }
    match api
        .patch(
            crd_name,
            &crate::controller::apply::patch_params(),
            &Patch::Merge(&patch(&wanted)),
        )
        .await
    {
        Ok(_) => {
            info!(crd = crd_name, target = %target, "pointed the CRD's conversion webhook at this operator");
            Ok(Outcome::Updated)
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Outcome::CrdMissing),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> ClientConfigTarget {
        ClientConfigTarget::Service {
            namespace: "ops".into(),
            name: "msop-webhook".into(),
            port: 443,
        }
    }

    #[test]
    fn a_service_target_has_path_port_and_ca() {
        let cc = desired(&service(), "PEM");
        assert_eq!(cc.url, None);
        assert_eq!(cc.ca_bundle, Some(ByteString(b"PEM".to_vec())));
        let svc = cc.service.expect("service");
        assert_eq!(
            (svc.namespace.as_str(), svc.name.as_str()),
            ("ops", "msop-webhook")
        );
        assert_eq!(svc.path.as_deref(), Some("/convert"));
        assert_eq!(svc.port, Some(443));
    }

    #[test]
    fn the_patch_clears_the_other_reference_and_encodes_the_ca() {
        let url = ClientConfigTarget::Url("https://127.0.0.1:9443/convert".into());
        let p = patch(&desired(&url, "PEM"));
        let cc = &p["spec"]["conversion"]["webhook"]["clientConfig"];
        assert_eq!(cc["url"], "https://127.0.0.1:9443/convert");
        assert_eq!(cc["service"], Value::Null);
        assert_eq!(cc["caBundle"], "UEVN");
        assert_eq!(p["spec"]["conversion"]["strategy"], "Webhook");
        assert_eq!(
            p["spec"]["conversion"]["webhook"]["conversionReviewVersions"],
            json!(["v1"])
        );
        let p = patch(&desired(&service(), "PEM"));
        assert_eq!(
            p["spec"]["conversion"]["webhook"]["clientConfig"]["url"],
            Value::Null
        );
    }

    #[test]
    fn up_to_date_needs_strategy_versions_and_the_same_client_config() {
        let wanted = desired(&service(), "PEM");
        let conv =
            |strategy: &str, versions: &[&str], cc: WebhookClientConfig| CustomResourceConversion {
                strategy: strategy.into(),
                webhook: Some(WebhookConversion {
                    client_config: Some(cc),
                    conversion_review_versions: versions.iter().map(|s| s.to_string()).collect(),
                }),
            };
        assert!(up_to_date(
            Some(&conv("Webhook", &["v1"], wanted.clone())),
            &wanted
        ));
        assert!(!up_to_date(None, &wanted));
        assert!(!up_to_date(
            Some(&CustomResourceConversion {
                strategy: "None".into(),
                webhook: None
            }),
            &wanted
        ));
        assert!(!up_to_date(
            Some(&conv("Webhook", &["v1", "v1beta1"], wanted.clone())),
            &wanted
        ));
        assert!(!up_to_date(
            Some(&conv("Webhook", &["v1"], desired(&service(), "OTHER"))),
            &wanted
        ));
    }
}
