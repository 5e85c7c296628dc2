//! The webhook's TLS configuration: a rustls server config whose certificate
//! can be swapped while it serves, so that a renewed certificate (from the
//! shared Secret or from cert-manager's mounted files) takes effect on the
//! next handshake without a restart.
//!
//! The crypto provider is ring, passed explicitly: kube may or may not have
//! installed a process-wide default provider, and relying on either would
//! make the webhook depend on what else ran first.

use std::fmt;
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no certificate in the PEM text")]
    NoCertificate,
    #[error("cannot read the PEM certificate: {0}")]
    Certificate(String),
    #[error("cannot read the PEM private key: {0}")]
    Key(String),
    #[error("the private key does not fit the certificate: {0}")]
    Mismatch(rustls::Error),
    #[error("cannot build the TLS configuration: {0}")]
    Config(rustls::Error),
}

/// The crypto provider of every webhook TLS object (see the module doc).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain (leaf first) and its key, checked to belong together.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| TlsError::Key(e.to_string()))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(TlsError::Mismatch)
}

/// The certificate being served; [`ServingCert::replace`] swaps it for the
/// next handshakes (connections already open keep theirs).
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

impl ServingCert {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<ServingCert, TlsError> {
        Ok(ServingCert {
            current: RwLock::new(Arc::new(certified_key(cert_pem, key_pem)?)),
        })
    }

    /// Serves `cert_pem`/`key_pem` from now on. Returns whether the leaf
    /// certificate changed; on an error the current one stays.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<bool, TlsError> {
        let next = Arc::new(certified_key(cert_pem, key_pem)?);
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let changed = current.cert.first() != next.cert.first();
        *current = next;
        Ok(changed)
    }

    /// The leaf certificate (DER) served right now.
    pub fn leaf(&self) -> Option<CertificateDer<'static>> {
        self.get().cert.first().cloned()
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// A server config (TLS 1.2 and 1.3, HTTP/1.1, no client certificates) that
/// asks `cert` for the certificate at every handshake.
pub fn server_config(cert: Arc<ServingCert>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
