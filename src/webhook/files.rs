//! Certificates from files, for `--webhook-certs=external`: cert-manager
//! writes them into a Secret that the pod mounts (`tls.crt`, `tls.key`, and
//! `ca.crt` for its CA and self-signed issuers). The kubelet updates the
//! mounted files in place when cert-manager renews, so they are read again
//! now and then (see `maintain`) instead of once at startup.
//!
//! When `ca.crt` is there and the operator is told where it is reached
//! (`--webhook-service`), it keeps the CRD's `caBundle` itself, so the chart
//! needs neither cert-manager's CA injector nor a templated CRD (Helm never
//! templates `crds/`).

use std::path::{Path, PathBuf};

use super::certs::KeyedCert;

/// The certificate file in the directory, as cert-manager's Secret names it.
pub const CERT_FILE: &str = "tls.crt";
/// The key file in the directory.
pub const KEY_FILE: &str = "tls.key";
/// The issuing CA, which cert-manager adds for CA and self-signed issuers.
pub const CA_FILE: &str = "ca.crt";

/// What the directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mounted {
    pub serving: KeyedCert,
    /// `None` when the issuer writes no `ca.crt` (a public CA, say): then
    /// the CRD's `caBundle` is someone else's to keep.
    pub ca_pem: Option<String>,
}

/// Why the files could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct FilesError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Reads `dir/tls.crt`, `dir/tls.key` and, if present, `dir/ca.crt` (small
/// files, off the async threads).
pub async fn read(dir: &Path) -> Result<Mounted, FilesError> {
    let dir = dir.to_path_buf();
    let blocking = tokio::task::spawn_blocking(move || {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| FilesError { path, source })
        };
        let serving = KeyedCert {
            cert_pem: read(CERT_FILE)?,
            key_pem: read(KEY_FILE)?,
        };
        let ca_pem = std::fs::read_to_string(dir.join(CA_FILE))
            .ok()
            .filter(|c| !c.trim().is_empty());
        Ok(Mounted { serving, ca_pem })
    });
    match blocking.await {
        Ok(result) => result,
        Err(e) => Err(FilesError {
            path: PathBuf::new(),
            source: std::io::Error::other(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_both_files_and_names_a_missing_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read(dir.path()).await.expect_err("nothing there yet");
        assert!(err.to_string().contains("tls.crt"), "{err}");
        std::fs::write(dir.path().join(CERT_FILE), "CERT").expect("write");
        let err = read(dir.path()).await.expect_err("no key yet");
        assert!(err.to_string().contains("tls.key"), "{err}");
        std::fs::write(dir.path().join(KEY_FILE), "KEY").expect("write");
        let got = read(dir.path()).await.expect("both");
        assert_eq!(
            (got.serving.cert_pem.as_str(), got.serving.key_pem.as_str()),
            ("CERT", "KEY")
        );
        assert_eq!(got.ca_pem, None, "no ca.crt: the caBundle is not ours");
        std::fs::write(dir.path().join(CA_FILE), "CA").expect("write");
        assert_eq!(
            read(dir.path()).await.expect("all").ca_pem.as_deref(),
            Some("CA")
        );
    }
}
