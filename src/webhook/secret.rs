//! The operator's own CA and serving certificate, kept in one Secret that
//! every replica shares: the API server calls whichever replica the Service
//! picks, and trusts one `caBundle`, so all replicas must serve certificates
//! from the same CA.
//!
//! Replicas race at startup; the API server settles it: `create` succeeds for
//! one and gives the others AlreadyExists, and `replace` carries the
//! resourceVersion it read, so of two concurrent renewals one gets a 409.
//! The losers read what the winner wrote. Renewal keeps the CA while it has
//! more than a year left, so the published `caBundle` rarely changes; when a
//! new CA is made, the previous one stays in `ca.crt` behind it, so replicas
//! still serving a certificate of the old CA stay trusted until they reload.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client};
use time::OffsetDateTime;
use tracing::{debug, info};

use super::certs::{self, CertError, KeyedCert, Sans};
use crate::core::labels::{MANAGED_BY, MANAGED_BY_LABEL};

/// The Secret's name unless `--webhook-secret` says otherwise.
pub const DEFAULT_SECRET_NAME: &str = "modelservice-operator-webhook-certs";
/// The CA bundle the CRD's `caBundle` publishes (current CA first).
pub const CA_CRT: &str = "ca.crt";
/// The current CA's private key, to sign renewed serving certificates.
pub const CA_KEY: &str = "ca.key";
/// The serving certificate, as in any `kubernetes.io/tls` Secret.
pub const TLS_CRT: &str = "tls.crt";
/// The serving certificate's private key.
pub const TLS_KEY: &str = "tls.key";
/// Reads and writes before giving up for now when other replicas keep
/// winning; the caller retries later.
const MAX_ATTEMPTS: usize = 5;

/// Why the Secret could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("webhook certificate Secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("webhook certificate Secret: {0}")]
    Cert(#[from] CertError),
    #[error(
        "webhook certificate Secret {namespace}/{name}: still changing under us after {MAX_ATTEMPTS} attempts"
    )]
    Contended { namespace: String, name: String },
}

/// What the webhook serves and publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfSigned {
    /// PEM, the current CA first; goes into the CRD's `caBundle`.
    pub ca_bundle_pem: String,
    /// The serving certificate and key.
    pub serving: KeyedCert,
}

/// Returns the shared certificates from Secret `namespace/name`, creating
/// or renewing them first when they are missing, unreadable, expire within
/// 30 days or do not name `wanted`.
pub async fn ensure(
    client: &Client,
    namespace: &str,
    name: &str,
    wanted: &Sans,
) -> Result<SelfSigned, SecretError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    ensure_at(&api, namespace, name, wanted, OffsetDateTime::now_utc()).await
}

pub(crate) async fn ensure_at(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
    wanted: &Sans,
    now: OffsetDateTime,
) -> Result<SelfSigned, SecretError> {
    let api_error = |source| SecretError::Api {
        namespace: namespace.to_string(),
        name: name.to_string(),
        source,
    };
    for _ in 0..MAX_ATTEMPTS {
        let current = api.get_opt(name).await.map_err(api_error)?;
        let stored = current
            .as_ref()
            .map(Stored::from_secret)
            .unwrap_or_default();
        let (next, reason) = match decide(&stored, wanted, now)? {
            Decision::Keep(certs) => return Ok(certs),
            Decision::Write { next, reason } => (next, reason),
        };
        let written = match current {
            None => {
                api.create(
                    &crate::controller::apply::post_params(),
                    &new_secret(name, &next),
                )
                .await
            }
            Some(mut secret) => {
                // resourceVersion stays as read: a concurrent writer makes this a 409.
                let data = secret.data.get_or_insert_with(BTreeMap::new);
                data.extend(next.data());
                api.replace(name, &crate::controller::apply::post_params(), &secret)
                    .await
            }
        };
        match written {
            Ok(_) => {
                info!(secret = %format!("{namespace}/{name}"), %reason, sans = %wanted, "wrote new webhook certificates");
                return next
                    .certs()
                    .ok_or(SecretError::Cert(CertError::NoCertificate));
            }
            // AlreadyExists or Conflict: another replica wrote first; read theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                debug!(secret = %format!("{namespace}/{name}"), "another replica wrote the webhook certificates first; reading them");
            }
            Err(e) => return Err(api_error(e)),
        }
    }
    Err(SecretError::Contended {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// The four keys as read from (or to be written to) the Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Stored {
    ca_crt: Option<String>,
    ca_key: Option<String>,
    tls_crt: Option<String>,
    tls_key: Option<String>,
}

impl Stored {
    fn from_secret(s: &Secret) -> Stored {
        let get = |k: &str| {
            s.data
                .as_ref()
                .and_then(|d| d.get(k))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .filter(|t| !t.trim().is_empty())
        };
        Stored {
            ca_crt: get(CA_CRT),
            ca_key: get(CA_KEY),
            tls_crt: get(TLS_CRT),
            tls_key: get(TLS_KEY),
        }
    }

    fn data(&self) -> BTreeMap<String, ByteString> {
        [
            (CA_CRT, &self.ca_crt),
            (CA_KEY, &self.ca_key),
            (TLS_CRT, &self.tls_crt),
            (TLS_KEY, &self.tls_key),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), ByteString(v.clone()?.into_bytes()))))
        .collect()
    }

    fn certs(&self) -> Option<SelfSigned> {
        Some(SelfSigned {
            ca_bundle_pem: self.ca_crt.clone()?,
            serving: KeyedCert {
                cert_pem: self.tls_crt.clone()?,
                key_pem: self.tls_key.clone()?,
            },
        })
    }

    /// The current CA (first of `ca.crt`) with its key, if it may still sign
    /// serving certificates at `now`; else why not.
    fn usable_ca(&self, now: OffsetDateTime) -> Result<KeyedCert, String> {
        let (Some(bundle), Some(key)) = (&self.ca_crt, &self.ca_key) else {
            return Err("there is no CA".into());
        };
        let Some(cert_pem) = certs::split_bundle(bundle).into_iter().next() else {
            return Err("the CA certificate is unreadable".into());
        };
        let info = certs::inspect(&cert_pem).map_err(|e| format!("the CA is unreadable: {e}"))?;
        if !info.is_ca {
            return Err("the CA certificate is not a CA".into());
        }
        if !certs::key_matches(&cert_pem, key) {
            return Err("the CA key does not fit the CA certificate".into());
        }
        if info.not_after - now <= certs::CA_MIN_REMAINING {
            return Err(format!("the CA expires at {}", info.not_after));
        }
        Ok(KeyedCert {
            cert_pem,
            key_pem: key.clone(),
        })
    }

    /// Whether the serving certificate can be served for `wanted` at `now`;
    /// else why not.
    fn serving_problem(&self, wanted: &Sans, now: OffsetDateTime) -> Option<String> {
        let (Some(crt), Some(key), Some(ca)) = (&self.tls_crt, &self.tls_key, &self.ca_crt) else {
            return Some("there are no certificates yet".into());
        };
        if let Some(r) = certs::needs_renewal(crt, wanted, now) {
            return Some(r.to_string());
        }
        if !certs::key_matches(crt, key) {
            return Some("the serving key does not fit the serving certificate".into());
        }
        if !certs::issued_by(crt, ca) {
            return Some("the serving certificate is not signed by the current CA".into());
        }
        None
    }
}

enum Decision {
    Keep(SelfSigned),
    Write { next: Stored, reason: String },
}

/// What to do with what the Secret holds: keep it, or write a new serving
/// certificate (from the same CA while it has more than a year left, else
/// from a new CA).
fn decide(stored: &Stored, wanted: &Sans, now: OffsetDateTime) -> Result<Decision, CertError> {
    let Some(reason) = stored.serving_problem(wanted, now) else {
        if let Some(certs) = stored.certs() {
            return Ok(Decision::Keep(certs));
        }
        return Err(CertError::NoCertificate);
    };
    // Names that an older replica (e.g. one still running during a rollout
    // that changes --webhook-url) needs stay in the new certificate, so two
    // versions do not renew against each other; they drop out at the
    // yearly renewal.
    let still_valid = stored
        .tls_crt
        .as_deref()
        .and_then(|c| certs::inspect(c).ok())
        .filter(|old| old.not_after - now >= certs::RENEW_BEFORE);
    let sans = match still_valid {
        Some(old) => wanted.union(&old.sans),
        None => wanted.clone(),
    };
    match stored.usable_ca(now) {
        Ok(ca) => {
            let serving = certs::issue_serving(&ca, &sans, now)?;
            Ok(Decision::Write {
                next: Stored {
                    ca_crt: stored.ca_crt.clone(),
                    ca_key: Some(ca.key_pem),
                    tls_crt: Some(serving.cert_pem),
                    tls_key: Some(serving.key_pem),
                },
                reason,
            })
        }
        Err(ca_problem) => {
            let ca = certs::new_ca(now)?;
            let serving = certs::issue_serving(&ca, &sans, now)?;
            // The previous CA, while still valid, stays trusted behind the new one.
            let previous = stored
                .ca_crt
                .as_deref()
                .and_then(|b| certs::split_bundle(b).into_iter().next())
                .filter(|old| matches!(certs::inspect(old), Ok(i) if i.not_after > now));
            let bundle = match previous {
                Some(old) => format!("{}{old}", ca.cert_pem),
                None => ca.cert_pem.clone(),
            };
            Ok(Decision::Write {
                next: Stored {
                    ca_crt: Some(bundle),
                    ca_key: Some(ca.key_pem),
                    tls_crt: Some(serving.cert_pem),
                    tls_key: Some(serving.key_pem),
                },
                reason: format!("{reason}; new CA because {ca_problem}"),
            })
        }
    }
}

fn new_secret(name: &str, stored: &Stored) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
                (
                    "app.kubernetes.io/component".to_string(),
                    "conversion-webhook".to_string(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(stored.data()),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fake_apiserver::{FailRule, FakeApiServer, Verb};
    use time::Duration;

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn hook() -> Sans {
        Sans::for_service("ops", "hook")
    }

    fn write(d: Decision) -> (Stored, String) {
        match d {
            Decision::Write { next, reason } => (next, reason),
            Decision::Keep(_) => panic!("expected a write"),
        }
    }

    fn first_ca(s: &Stored) -> String {
        certs::split_bundle(s.ca_crt.as_deref().unwrap_or_default())
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    /// A complete, valid Stored made at `at`.
    fn made_at(at: OffsetDateTime, sans: &Sans) -> Stored {
        write(decide(&Stored::default(), sans, at).expect("decide")).0
    }

    #[test]
    fn nothing_stored_makes_a_ca_and_a_serving_certificate() {
        let t = now();
        let (s, reason) = write(decide(&Stored::default(), &hook(), t).expect("decide"));
        assert!(reason.contains("no certificates"), "{reason}");
        let certs = s.certs().expect("complete");
        assert_eq!(certs::split_bundle(&certs.ca_bundle_pem).len(), 1);
        assert!(certs::issued_by(
            &certs.serving.cert_pem,
            &certs.ca_bundle_pem
        ));
        assert_eq!(
            certs::needs_renewal(&certs.serving.cert_pem, &hook(), t),
            None
        );
        assert!(certs::key_matches(
            &first_ca(&s),
            s.ca_key.as_deref().unwrap_or_default()
        ));
    }

    #[test]
    fn valid_certificates_are_kept() {
        let t = now();
        let s = made_at(t, &hook());
        match decide(&s, &hook(), t + Duration::days(300)).expect("decide") {
            Decision::Keep(c) => assert_eq!(Some(c), s.certs()),
            Decision::Write { reason, .. } => panic!("rewrote: {reason}"),
        }
    }

    #[test]
    fn an_expiring_serving_certificate_is_renewed_by_the_same_ca() {
        let t = now();
        let s = made_at(t, &hook());
        let later = t + Duration::days(340);
        let (n, reason) = write(decide(&s, &hook(), later).expect("decide"));
        assert!(reason.contains("expires"), "{reason}");
        assert_eq!(n.ca_crt, s.ca_crt);
        assert_eq!(n.ca_key, s.ca_key);
        assert_ne!(n.tls_crt, s.tls_crt);
        let crt = n.tls_crt.as_deref().unwrap_or_default();
        assert!(certs::issued_by(crt, &first_ca(&s)));
        assert_eq!(certs::needs_renewal(crt, &hook(), later), None);
    }

    #[test]
    fn a_missing_name_is_added_and_the_old_names_kept() {
        let t = now();
        let s = made_at(t, &Sans::for_host("127.0.0.1"));
        let (n, reason) = write(decide(&s, &hook(), t).expect("decide"));
        assert!(reason.contains("does not name"), "{reason}");
        assert_eq!(n.ca_crt, s.ca_crt);
        let info = certs::inspect(n.tls_crt.as_deref().unwrap_or_default()).expect("info");
        assert_eq!(info.sans, hook().union(&Sans::for_host("127.0.0.1")));
    }

    #[test]
    fn a_ca_with_less_than_a_year_left_is_replaced_and_kept_behind_the_new_one() {
        let old_time = now() - certs::CA_VALIDITY + Duration::days(200);
        let s = made_at(old_time, &hook());
        let t = now();
        let (n, reason) = write(decide(&s, &hook(), t).expect("decide"));
        assert!(reason.contains("new CA"), "{reason}");
        let bundle = certs::split_bundle(n.ca_crt.as_deref().unwrap_or_default());
        assert_eq!(bundle.len(), 2, "new CA, then the old one");
        assert_eq!(bundle[1].trim(), first_ca(&s).trim());
        assert_ne!(n.ca_key, s.ca_key);
        let crt = n.tls_crt.as_deref().unwrap_or_default();
        assert!(certs::issued_by(crt, &bundle[0]));
        assert!(
            certs::inspect(crt).expect("info").not_after - t > Duration::days(360),
            "a full year from the new CA"
        );
    }

    #[test]
    fn mismatched_or_missing_pieces_are_repaired() {
        let t = now();
        let s = made_at(t, &hook());
        let other = made_at(t, &hook());
        // Serving key of another pair: new serving certificate, same CA.
        let mixed_key = Stored {
            tls_key: other.tls_key.clone(),
            ..s.clone()
        };
        let (n, reason) = write(decide(&mixed_key, &hook(), t).expect("decide"));
        assert!(reason.contains("key does not fit"), "{reason}");
        assert_eq!(n.ca_crt, s.ca_crt);
        // Serving certificate of another CA: new serving certificate, our CA.
        let foreign = Stored {
            tls_crt: other.tls_crt.clone(),
            tls_key: other.tls_key.clone(),
            ..s.clone()
        };
        let (n, reason) = write(decide(&foreign, &hook(), t).expect("decide"));
        assert!(reason.contains("not signed by the current CA"), "{reason}");
        assert_eq!(n.ca_crt, s.ca_crt);
        // No CA key: a new CA.
        let keyless = Stored {
            ca_key: None,
            ..s.clone()
        };
        let (n, reason) =
            write(decide(&keyless, &hook(), t + Duration::days(340)).expect("decide"));
        assert!(reason.contains("no CA"), "{reason}");
        assert_ne!(n.ca_crt, s.ca_crt);
    }

    #[tokio::test]
    async fn concurrent_replicas_end_with_one_secret_and_one_ca() {
        let server = FakeApiServer::start().await;
        let client = server.client();
        let wanted = hook();
        let (a, b) = tokio::join!(
            ensure(&client, "default", DEFAULT_SECRET_NAME, &wanted),
            ensure(&client, "default", DEFAULT_SECRET_NAME, &wanted),
        );
        let (a, b) = (a.expect("replica a"), b.expect("replica b"));
        assert_eq!(a, b, "both serve what the winner wrote");
        let counts = server.counts();
        assert!(counts.get(Verb::Create, "secrets") <= 2);
        let stored = server
            .get_object("", "secrets", "default", DEFAULT_SECRET_NAME)
            .expect("the Secret");
        assert_eq!(stored["type"], "kubernetes.io/tls");
        for key in [CA_CRT, CA_KEY, TLS_CRT, TLS_KEY] {
            assert!(stored["data"][key].is_string(), "{key} in {stored}");
        }

        // Another replica later reads and writes nothing.
        server.reset_counts();
        let c = ensure(&client, "default", DEFAULT_SECRET_NAME, &wanted)
            .await
            .expect("replica c");
        assert_eq!(c, a);
        assert_eq!(server.counts().writes(), 0);
    }

    #[tokio::test]
    async fn concurrent_renewals_keep_the_ca_and_agree() {
        let server = FakeApiServer::start().await;
        let api: Api<Secret> = Api::namespaced(server.client(), "default");
        let t = now();
        let first = ensure_at(&api, "default", "certs", &hook(), t)
            .await
            .expect("made");
        let later = t + Duration::days(340);
        let wanted = hook();
        let (a, b) = tokio::join!(
            ensure_at(&api, "default", "certs", &wanted, later),
            ensure_at(&api, "default", "certs", &wanted, later),
        );
        let (a, b) = (a.expect("a"), b.expect("b"));
        assert_eq!(a, b);
        assert_eq!(a.ca_bundle_pem, first.ca_bundle_pem, "same CA");
        assert_ne!(a.serving, first.serving, "renewed");
        assert_eq!(
            certs::needs_renewal(&a.serving.cert_pem, &hook(), later),
            None
        );
    }

    #[tokio::test]
    async fn api_errors_are_reported_with_the_secret() {
        let server = FakeApiServer::start().await;
        server.fail_next(FailRule::new(503).verb(Verb::Get).resource("secrets"));
        let err = ensure(&server.client(), "default", "certs", &hook())
            .await
            .expect_err("503");
        assert!(err.to_string().contains("default/certs"), "{err}");
        // A namespace that does not exist: the create fails, nothing panics.
        let err = ensure(&server.client(), "nowhere", "certs", &hook())
            .await
            .expect_err("no namespace");
        assert!(err.to_string().contains("nowhere/certs"), "{err}");
        // And then it works.
        ensure(&server.client(), "default", "certs", &hook())
            .await
            .expect("recovers");
    }
}
