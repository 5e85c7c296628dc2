//! Certificates from files, for `--webhook-certs=external`: cert-manager
//! writes them into a Secret that the pod mounts (`tls.crt`, `tls.key`), and
//! its CA injector fills the CRD's `caBundle`. The kubelet updates the mounted
//! files in place when cert-manager renews, so they are read again now and
//! then (see `maintain`) instead of once at startup.

use std::path::{Path, PathBuf};

use super::certs::KeyedCert;

/// The certificate file in the directory, as cert-manager's Secret names it.
pub const CERT_FILE: &str = "tls.crt";
/// The key file in the directory.
pub const KEY_FILE: &str = "tls.key";

/// Why the files could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct FilesError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Reads `dir/tls.crt` and `dir/tls.key` (small files, off the async threads).
pub async fn read(dir: &Path) -> Result<KeyedCert, FilesError> {
    let dir = dir.to_path_buf();
    let blocking = tokio::task::spawn_blocking(move || {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| FilesError { path, source })
        };
        Ok(KeyedCert {
            cert_pem: read(CERT_FILE)?,
            key_pem: read(KEY_FILE)?,
        })
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
        let pair = read(dir.path()).await.expect("both");
        assert_eq!(
            (pair.cert_pem.as_str(), pair.key_pem.as_str()),
            ("CERT", "KEY")
        );
    }
}
