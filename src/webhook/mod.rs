//! The CRD conversion webhook: HTTPS `POST /convert`, served by every
//! replica, leader or not, because the API server calls any ready pod behind
//! the Service and reads of objects stored in the other version fail while
//! no one answers (see ../shared/DESIGN.md, "The webhook").
//!
//! - [`review`]: the ConversionReview protocol (pure); the conversion itself
//!   is a [`Convert`] given by the caller, pure code in the core.
//! - [`certs`]: CA, serving certificate and the renewal decision (pure).
//! - [`secret`]: the operator's own certificates, shared by all replicas in
//!   one Secret.
//! - [`files`]: certificates mounted by cert-manager instead.
//! - [`client_config`]: keeps the CRD's `spec.conversion` pointing here.
//! - [`tls`], [`server`]: rustls with a hot-swappable certificate, axum.
//! - `maintain`: the background task that renews and re-reads.

pub mod certs;
pub mod client_config;
pub mod files;
mod maintain;
pub mod review;
pub mod secret;
pub mod server;
pub mod tls;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::Client;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use certs::{KeyedCert, Sans};
use tls::{ServingCert, TlsError};

/// Converts one object (a whole ModelService as JSON) to `desired_api_version`
/// (e.g. "serving.modelservice.dev/v1beta1"). Err carries a human message.
pub type Convert = fn(serde_json::Value, &str) -> Result<serde_json::Value, String>;

/// The name of the ModelService CRD, whose clientConfig the webhook keeps.
pub use crate::api::CRD_NAME;

/// Everything the webhook needs to know, already parsed (see `cli`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where to listen (HTTPS); port 0 picks a free one.
    pub addr: SocketAddr,
    pub certs: CertSource,
    /// Where the API server should call us; `None` leaves the CRD alone.
    /// Only used with [`CertSource::Secret`]: with cert-manager, the CRD's
    /// conversion is the chart's and the CA injector's business.
    pub client_config: Option<ClientConfigTarget>,
    /// The CRD whose `spec.conversion` to keep (normally [`CRD_NAME`]).
    pub crd_name: String,
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// The operator's own CA and certificate, in this Secret (made if missing).
    Secret { namespace: String, name: String },
    /// `tls.crt` and `tls.key` in this directory (cert-manager), re-read every minute.
    Files { dir: PathBuf },
}

/// How the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientConfigTarget {
    /// An `https://` URL, for an operator outside the cluster.
    Url(String),
    /// A Service in front of the operator's pods; path `/convert`.
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

impl ClientConfigTarget {
    /// The names the serving certificate must hold for the API server to
    /// accept it when it calls this target.
    pub fn sans(&self) -> Sans {
        match self {
            ClientConfigTarget::Url(url) => url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(Sans::for_host))
                .unwrap_or_default(),
            ClientConfigTarget::Service {
                namespace, name, ..
            } => Sans::for_service(namespace, name),
        }
    }
}

impl fmt::Display for ClientConfigTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientConfigTarget::Url(url) => write!(f, "{url}"),
            ClientConfigTarget::Service {
                namespace,
                name,
                port,
            } => write!(
                f,
                "service {namespace}/{name}:{port}{}",
                client_config::CONVERT_PATH
            ),
        }
    }
}

impl WebhookConfig {
    /// The names our own serving certificate holds: the target's, or, with
    /// no target, the local names (someone else points the CRD at us).
    pub fn wanted_sans(&self) -> Sans {
        match &self.client_config {
            Some(t) => t.sans(),
            None => Sans::for_host("localhost").union(&Sans::for_host("127.0.0.1")),
        }
    }
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot listen for the conversion webhook on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("conversion webhook: {0}")]
    Io(#[source] std::io::Error),
    #[error("the conversion webhook's certificate cannot be served: {0}")]
    Tls(#[from] TlsError),
    #[error("shutdown requested before the conversion webhook had its certificate")]
    Cancelled,
}

/// The started webhook.
#[derive(Debug)]
pub struct Running {
    /// The address it listens on (the real port when port 0 was asked for).
    pub addr: SocketAddr,
    /// Ends after shutdown, once open requests are answered.
    pub handle: JoinHandle<()>,
}

/// The certificate being served, and the CA bundle to publish (only for
/// our own certificates).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Loaded {
    serving: KeyedCert,
    ca_bundle_pem: Option<String>,
}

/// Binds `cfg.addr`, obtains the certificate (retrying while the API server
/// or the files are not there yet, until `shutdown`), serves, and spawns the
/// maintenance task (renewal, re-reading, the CRD's clientConfig at once and
/// then hourly). Everything stops when `shutdown` resolves.
pub async fn start(
    client: Client,
    cfg: WebhookConfig,
    convert: Convert,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, WebhookError> {
    let shutdown = shutdown.boxed().shared();
    // Bind first, so that a taken port fails at once, not after the certificates.
    let listener = TcpListener::bind(cfg.addr)
        .await
        .map_err(|source| WebhookError::Bind {
            addr: cfg.addr,
            source,
        })?;
    let loaded = obtain(&client, &cfg, shutdown.clone()).await?;
    let serving = Arc::new(ServingCert::new(
        &loaded.serving.cert_pem,
        &loaded.serving.key_pem,
    )?);
    let server = server::serve(listener, serving.clone(), convert, shutdown.clone())?;
    let maintenance = tokio::spawn(maintain::run(
        client,
        cfg,
        serving,
        loaded,
        shutdown.clone(),
    ));
    let handle = tokio::spawn(async move {
        let _ = tokio::join!(server.task, maintenance);
    });
    Ok(Running {
        addr: server.addr,
        handle,
    })
}

/// First delay between attempts to get the certificate; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between attempts: a recovered API server is noticed soon.
const MAX_RETRY: Duration = Duration::from_secs(30);

async fn obtain(
    client: &Client,
    cfg: &WebhookConfig,
    shutdown: impl Future<Output = ()> + Clone,
) -> Result<Loaded, WebhookError> {
    let mut delay = FIRST_RETRY;
    loop {
        match load(client, cfg).await {
            Ok(loaded) => return Ok(loaded),
            Err(problem) => {
                warn!(%problem, retry_in = ?delay, "conversion webhook: no usable certificate yet")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.clone() => return Err(WebhookError::Cancelled),
        }
        delay = (delay * 2).min(MAX_RETRY);
    }
}

/// One attempt to get a certificate that can be served.
async fn load(client: &Client, cfg: &WebhookConfig) -> Result<Loaded, String> {
    let loaded = match &cfg.certs {
        CertSource::Secret { namespace, name } => {
            let own = secret::ensure(client, namespace, name, &cfg.wanted_sans())
                .await
                .map_err(|e| e.to_string())?;
            Loaded {
                serving: own.serving,
                ca_bundle_pem: Some(own.ca_bundle_pem),
            }
        }
        CertSource::Files { dir } => {
            let mounted = files::read(dir).await.map_err(|e| e.to_string())?;
            if mounted.ca_pem.is_none() && cfg.client_config.is_some() {
                info!(
                    "no ca.crt beside the mounted certificate: the CRD's caBundle is left to cert-manager's CA injector"
                );
            }
            Loaded {
                serving: mounted.serving,
                ca_bundle_pem: mounted.ca_pem,
            }
        }
    };
    tls::certified_key(&loaded.serving.cert_pem, &loaded.serving.key_pem)
        .map_err(|e| e.to_string())?;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_follow_the_target() {
        let url = ClientConfigTarget::Url("https://127.0.0.1:9443/convert".into());
        assert_eq!(url.sans(), Sans::for_host("127.0.0.1"));
        assert!(url.sans().dns.is_empty());
        let v6 = ClientConfigTarget::Url("https://[::1]:9443/convert".into());
        assert_eq!(
            v6.sans().ips.into_iter().collect::<Vec<_>>(),
            vec!["::1".parse::<std::net::IpAddr>().expect("ip")]
        );
        let dns = ClientConfigTarget::Url("https://Webhook.example.com/convert".into());
        assert_eq!(
            dns.sans().dns.into_iter().collect::<Vec<_>>(),
            vec!["webhook.example.com".to_string()]
        );
        let svc = ClientConfigTarget::Service {
            namespace: "ops".into(),
            name: "hook".into(),
            port: 443,
        };
        assert_eq!(
            svc.sans().dns.into_iter().collect::<Vec<_>>(),
            vec!["hook.ops.svc", "hook.ops.svc.cluster.local"]
        );
        assert_eq!(svc.to_string(), "service ops/hook:443/convert");
    }
}
