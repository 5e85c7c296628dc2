//! The webhook's background task: keeps the served certificate current and
//! the CRD pointing at us, without a restart.
//!
//! - Own certificates: every hour, [`secret::ensure`] (renews when due, or
//!   picks up what another replica renewed) and the CRD's clientConfig; the
//!   clientConfig also right away at start. A failure (API server down, CRD
//!   not installed yet) is retried sooner, backing off from 5 s to 5 min,
//!   never in a hot loop and never fatal.
//! - cert-manager files: re-read every minute; a changed pair is served
//!   from the next handshake. cert-manager renews well before expiry, so a
//!   minute of delay costs nothing.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tracing::{debug, info, warn};

use super::client_config::{self, Outcome};
use super::tls::ServingCert;
use super::{CertSource, Loaded, WebhookConfig, files, secret};

/// How often our own certificates and the CRD are checked when all is well.
pub const CHECK_EVERY: Duration = Duration::from_secs(3600);
/// How often cert-manager's files are re-read.
pub const RELOAD_FILES_EVERY: Duration = Duration::from_secs(60);
/// After a failure: 5 s, 10 s, 20 s ... up to this.
const MAX_RETRY: Duration = Duration::from_secs(300);

/// Runs until `shutdown`.
pub(super) async fn run(
    client: Client,
    cfg: WebhookConfig,
    serving: Arc<ServingCert>,
    loaded: Loaded,
    shutdown: impl Future<Output = ()> + Clone + Send + 'static,
) {
    let mut loaded = loaded;
    let mut failures: u32 = 0;
    let mut first = true;
    loop {
        let ok = match &cfg.certs {
            CertSource::Secret { namespace, name } => {
                own_certificates(&client, &cfg, namespace, name, &serving, &mut loaded, first).await
            }
            CertSource::Files { dir } => {
                if !first {
                    reload_files(dir, &serving, &mut loaded).await;
                }
                keep_client_config(&client, &cfg, &loaded).await
            }
        };
        first = false;
        let delay = match (&cfg.certs, ok) {
            (CertSource::Files { .. }, _) => RELOAD_FILES_EVERY,
            (_, true) => {
                failures = 0;
                CHECK_EVERY
            }
            (_, false) => {
                failures = failures.saturating_add(1);
                retry_delay(failures)
            }
        };
        debug!(next_check_in = ?delay, "conversion webhook maintenance done");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.clone() => return,
        }
    }
}

/// 5 s after the first failure in a row, doubling, at most [`MAX_RETRY`].
fn retry_delay(failures: u32) -> Duration {
    let secs = 5u64.saturating_mul(1 << failures.saturating_sub(1).min(10));
    Duration::from_secs(secs).min(MAX_RETRY)
}

/// One round with our own certificates; false when something must be retried.
async fn own_certificates(
    client: &Client,
    cfg: &WebhookConfig,
    namespace: &str,
    name: &str,
    serving: &ServingCert,
    loaded: &mut Loaded,
    first: bool,
) -> bool {
    let mut ok = true;
    // At start the certificates were just obtained; no need to read again.
    if !first {
        match secret::ensure(client, namespace, name, &cfg.wanted_sans()).await {
            Ok(own) => {
                if own.serving != loaded.serving {
                    ok &= swap(serving, loaded, own.serving.clone(), "the shared Secret");
                }
                loaded.ca_bundle_pem = Some(own.ca_bundle_pem);
            }
            Err(e) => {
                warn!(error = %e, "conversion webhook: cannot check the certificates; serving the current ones");
                ok = false;
            }
        }
    }
    ok && keep_client_config(client, cfg, loaded).await
}

/// Points the CRD's conversion at us with our CA, when we were told where
/// we are reached and know the CA; false when it must be retried.
async fn keep_client_config(client: &Client, cfg: &WebhookConfig, loaded: &Loaded) -> bool {
    let (Some(target), Some(ca)) = (&cfg.client_config, &loaded.ca_bundle_pem) else {
        return true;
    };
    match client_config::reconcile(client, &cfg.crd_name, target, ca).await {
        Ok(Outcome::Updated | Outcome::Unchanged) => true,
        Ok(Outcome::CrdMissing) => {
            warn!(crd = %cfg.crd_name, "the CRD is not installed; its conversion webhook will be set once it is");
            false
        }
        Err(e) => {
            warn!(crd = %cfg.crd_name, error = %e, "cannot update the CRD's conversion webhook; will retry");
            false
        }
    }
}

/// Serves the mounted pair if it changed; on a read error the previous
/// certificate stays (the kubelet swaps the files atomically, so an error is
/// a real problem, not a half-written file).
async fn reload_files(dir: &std::path::Path, serving: &ServingCert, loaded: &mut Loaded) {
    match files::read(dir).await {
        Ok(mounted) => {
            if mounted.serving != loaded.serving {
                swap(serving, loaded, mounted.serving, "the mounted files");
            }
            loaded.ca_bundle_pem = mounted.ca_pem;
        }
        Err(e) => {
            warn!(error = %e, "conversion webhook: cannot re-read the certificate files; serving the previous certificate");
        }
    }
}

/// Serves `pair` from the next handshake; false (and the old one kept) if
/// it cannot be served.
fn swap(
    serving: &ServingCert,
    loaded: &mut Loaded,
    pair: super::certs::KeyedCert,
    from: &str,
) -> bool {
    match serving.replace(&pair.cert_pem, &pair.key_pem) {
        Ok(_) => {
            info!(from, "conversion webhook: serving a new certificate");
            loaded.serving = pair;
            true
        }
        Err(e) => {
            warn!(from, error = %e, "conversion webhook: the new certificate cannot be served; keeping the previous one");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn changed_files_are_served_and_broken_ones_ignored() {
        use crate::webhook::certs::{self, Sans};
        let now = time::OffsetDateTime::now_utc();
        let ca = certs::new_ca(now).expect("CA");
        let issue = || certs::issue_serving(&ca, &Sans::for_host("127.0.0.1"), now).expect("cert");
        let (old, new) = (issue(), issue());
        let dir = tempfile::tempdir().expect("tempdir");
        let put = |c: &certs::KeyedCert| {
            std::fs::write(dir.path().join("tls.crt"), &c.cert_pem).expect("write");
            std::fs::write(dir.path().join("tls.key"), &c.key_pem).expect("write");
        };
        let serving = ServingCert::new(&old.cert_pem, &old.key_pem).expect("cert");
        let mut loaded = Loaded {
            serving: old.clone(),
            ca_bundle_pem: None,
        };
        put(&new);
        reload_files(dir.path(), &serving, &mut loaded).await;
        assert_eq!(loaded.serving, new);
        let served = |s: &ServingCert| s.leaf().map(|d| d.to_vec());
        let new_der = served(&serving);
        // A key that does not fit: the new certificate stays.
        std::fs::write(dir.path().join("tls.key"), &old.key_pem).expect("write");
        reload_files(dir.path(), &serving, &mut loaded).await;
        assert_eq!(loaded.serving, new);
        assert_eq!(served(&serving), new_der);
        // Missing files: the same.
        std::fs::remove_file(dir.path().join("tls.crt")).expect("rm");
        reload_files(dir.path(), &serving, &mut loaded).await;
        assert_eq!(served(&serving), new_der);
    }

    #[test]
    fn retries_back_off_to_five_minutes() {
        assert_eq!(retry_delay(1), Duration::from_secs(5));
        assert_eq!(retry_delay(2), Duration::from_secs(10));
        assert_eq!(retry_delay(7), Duration::from_secs(300));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(300));
    }
}
