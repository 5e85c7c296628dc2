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

/// kubectl's record of what was last applied (client-side `kubectl apply`).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// kubectl's `record` with its clientConfig pointing where `wanted` does,
/// or `None` when it already does (or holds no clientConfig).
///
/// Why: `kubectl apply -f crds/` merges three ways, from this record. After
/// a local run put `url` where the file has `service`, a record still
/// naming `service` made kubectl keep `url` and add `service`, which the
/// API server refuses ("exactly one of url or service is required"). A
/// record naming `url` makes it remove `url` as it brings `service` back.
pub fn last_applied(record: &str, wanted: &WebhookClientConfig) -> Option<String> {
    let mut v: Value = serde_json::from_str(record).ok()?;
    let cc = v
        .pointer_mut("/spec/conversion/webhook/clientConfig")?
        .as_object_mut()?;
    let (set, unset) = if wanted.url.is_some() {
        ("url", "service")
    } else {
        ("service", "url")
    };
    let value = serde_json::to_value(wanted).ok()?.get(set)?.clone();
    if cc.get(set) == Some(&value) && !cc.contains_key(unset) {
        return None;
    }
    cc.remove(unset);
    cc.insert(set.into(), value);
    Some(v.to_string())
}

/// The record the CRD should carry, when it carries one that differs.
fn record_update(crd: &CustomResourceDefinition, wanted: &WebhookClientConfig) -> Option<String> {
    let record = crd.metadata.annotations.as_ref()?.get(LAST_APPLIED)?;
    last_applied(record, wanted)
}

/// Reads CRD `crd_name` and, when its conversion does not point at `target`
/// with `ca_bundle_pem` (or kubectl's record of it names the other
/// reference), patches it.
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
    let record = record_update(&crd, &wanted);
    if up_to_date(crd.spec.conversion.as_ref(), &wanted) && record.is_none() {
        return Ok(Outcome::Unchanged);
    }
    let mut body = patch(&wanted);
    if let Some(record) = record {
        body["metadata"] = json!({"annotations": {LAST_APPLIED: record}});
    }
    match api
        .patch(
            crd_name,
            &crate::controller::apply::patch_params(),
            &Patch::Merge(&body),
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

    /// What `kubectl apply -f crds/modelservice.yaml` records.
    fn record() -> String {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "modelservices.serving.modelservice.dev"},
            "spec": {"group": "serving.modelservice.dev", "conversion": {"strategy": "Webhook",
                "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
                    "service": {"namespace": "modelservice-system",
                        "name": "modelservice-operator-webhook", "path": "/convert", "port": 443}}}}}})
        .to_string()
    }

    #[test]
    fn kubectls_record_names_the_url_a_local_run_set_and_nothing_else_changes() {
        let url = ClientConfigTarget::Url("https://127.0.0.1:9443/convert".into());
        let rewritten = last_applied(&record(), &desired(&url, "PEM")).expect("rewritten");
        let v: Value = serde_json::from_str(&rewritten).expect("JSON");
        assert_eq!(
            v["spec"]["conversion"]["webhook"]["clientConfig"],
            json!({"url": "https://127.0.0.1:9443/convert"}),
            "no caBundle: the file has none, and kubectl keeps the live one"
        );
        assert_eq!(v["spec"]["group"], "serving.modelservice.dev");
        assert_eq!(
            last_applied(&rewritten, &desired(&url, "OTHER PEM")),
            None,
            "in step already"
        );
        // An operator installed later points it back at its Service.
        let back = last_applied(&rewritten, &desired(&service(), "PEM")).expect("back");
        let v: Value = serde_json::from_str(&back).expect("JSON");
        let cc = &v["spec"]["conversion"]["webhook"]["clientConfig"];
        assert_eq!(cc["url"], Value::Null);
        assert_eq!(cc["service"]["name"], "msop-webhook");
        assert_eq!(last_applied("not json", &desired(&url, "PEM")), None);
        assert_eq!(last_applied("{}", &desired(&url, "PEM")), None);
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
