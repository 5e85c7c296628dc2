//! The HTTP(S) client of `fetch`: hyper over rustls (ring, the system's CA
//! roots), plain http allowed for in-cluster mirrors and tests.
//!
//! Hugging Face answers a download with a redirect to its CDN, so redirects
//! are followed here, and the credentials (a bearer token, or S3's SigV4
//! signature) are sent only to the host they were given for: a CDN, or a
//! hostile redirect, must never see them.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::outcome::Failure;
use super::s3::Signer;

/// Hugging Face's own limit on redirects is 1 or 2; 5 leaves room for a
/// mirror without letting a loop run.
const MAX_REDIRECTS: usize = 5;

/// A JSON listing (or an S3 listing page, at most 1000 keys) larger than
/// this is no model repository's.
const MAX_JSON: usize = 64 << 20;

/// How requests prove who sends them, to the origin of each request's
/// first URL only.
pub(crate) enum Auth {
    Anonymous,
    /// `Authorization: Bearer {token}` (Hugging Face, http sources).
    Bearer(String),
    /// AWS Signature Version 4, computed for each request (S3).
    SigV4(Signer),
}

impl Auth {
    pub fn bearer(token: Option<String>) -> Self {
        token.map_or(Auth::Anonymous, Auth::Bearer)
    }
}

pub(crate) struct Client {
    hyper: Hyper<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    auth: Auth,
    stall: Duration,
}

impl Client {
    /// `auth` goes to the host of each request's first URL; `stall` bounds
    /// every wait for bytes.
    pub fn new(auth: Auth, connect_timeout: Duration, stall: Duration) -> Result<Self, Failure> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Failure::Fatal(format!("TLS setup: {e}")))?
            .with_root_certificates(native_roots())
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            hyper: Hyper::builder(TokioExecutor::new()).build(https),
            auth,
            stall,
        })
    }

    pub fn stall(&self) -> Duration {
        self.stall
    }

    /// Sends `method` to `url` (from byte `from` on when given), following
    /// redirects. Only transport failures are errors here: the caller
    /// judges the status.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        from: Option<u64>,
    ) -> Result<Response<Incoming>, Failure> {
        let first: Uri = url
            .parse()
            .map_err(|e| Failure::Permanent(format!("{} is not a URL: {e}", redact(url))))?;
        let mut uri = first.clone();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = Request::builder().method(method.clone()).uri(uri.clone());
            let range = from.map(|from| format!("bytes={from}-"));
            if let Some(range) = &range {
                req = req.header(header::RANGE, range);
            }
            if same_origin(&uri, &first) {
                match &self.auth {
                    Auth::Anonymous => {}
                    Auth::Bearer(token) => {
                        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
                    }
                    // Signed at each hop and attempt: the signature holds
                    // the time, which S3 allows to be 15 minutes off.
                    Auth::SigV4(signer) => {
                        let signed =
                            signer.headers(&method, &uri, range.as_deref(), SystemTime::now());
                        for (name, value) in signed {
                            req = req.header(name, value);
                        }
                    }
                }
            }
            let req = req
                .body(Empty::new())
                .map_err(|e| Failure::Permanent(format!("{}: {e}", redact(url))))?;
            let resp = tokio::time::timeout(self.stall, self.hyper.request(req))
                .await
                .map_err(|_| {
                    Failure::Retryable(format!(
                        "{} did not answer in {}s",
                        redact(&uri.to_string()),
                        self.stall.as_secs()
                    ))
                })?
                .map_err(|e| {
                    Failure::Retryable(format!("{}: {}", redact(&uri.to_string()), chain(&e)))
                })?;
            if !resp.status().is_redirection() || resp.status() == StatusCode::NOT_MODIFIED {
                return Ok(resp);
            }
            uri = location(&uri, resp.headers()).ok_or_else(|| {
                Failure::Permanent(format!(
                    "{} redirected ({}) without a usable Location",
                    redact(&uri.to_string()),
                    resp.status()
                ))
            })?;
        }
        Err(Failure::Permanent(format!(
            "{} redirected more than {MAX_REDIRECTS} times",
            redact(url)
        )))
    }

    /// GETs a JSON document: its body and its headers.
    pub async fn get_json(&self, url: &str) -> Result<(HeaderMap, Bytes), Failure> {
        let resp = self.send(Method::GET, url, None).await?;
        check_status(url, resp.status())?;
        let (_, headers, body) = self.collect(url, resp).await?;
        Ok((headers, body))
    }

    /// GETs a document whatever its status, for callers that read the
    /// reason of a refusal from its body (S3's XML errors).
    pub async fn get_document(&self, url: &str) -> Result<(StatusCode, HeaderMap, Bytes), Failure> {
        let resp = self.send(Method::GET, url, None).await?;
        self.collect(url, resp).await
    }

    /// The whole body of `resp`, bounded in size and in waiting.
    async fn collect(
        &self,
        url: &str,
        resp: Response<Incoming>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), Failure> {
        let (parts, body) = resp.into_parts();
        let limited = http_body_util::Limited::new(body, MAX_JSON);
        let body = tokio::time::timeout(self.stall, limited.collect())
            .await
            .map_err(|_| Failure::Retryable(format!("{} stalled", redact(url))))?
            .map_err(|e| Failure::Retryable(format!("{}: {e}", redact(url))))?
            .to_bytes();
        Ok((parts.status, parts.headers, body))
    }
}

/// Sorts a final status: success passes; 5xx and 429 are worth a retry;
/// the rest (401/403/404 above all) will not change by retrying.
pub(crate) fn check_status(url: &str, status: StatusCode) -> Result<(), Failure> {
    if status.is_success() {
        return Ok(());
    }
    let msg = format!("{} answered {status}", redact(url));
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        Err(Failure::Retryable(msg))
    } else {
        Err(Failure::Permanent(msg))
    }
}

/// A URL for messages: without its query, which may carry a presigned
/// URL's signature.
pub(crate) fn redact(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// Resolves a redirect's Location against the URL that answered it.
fn location(base: &Uri, headers: &HeaderMap) -> Option<Uri> {
    let loc = headers.get(header::LOCATION)?.to_str().ok()?;
    join(base, loc)
}

/// `target` read relative to `base`: absolute, host-relative (`/x`) or
/// path-relative (`x`). Also used for pagination links.
pub(crate) fn join(base: &Uri, target: &str) -> Option<Uri> {
    if target.contains("://") {
        return target.parse().ok();
    }
    let scheme = base.scheme_str()?;
    let authority = base.authority()?;
    if target.starts_with("//") {
        return format!("{scheme}:{target}").parse().ok();
    }
    let path = if target.starts_with('/') {
        target.to_string()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{target}")
    };
    format!("{scheme}://{authority}{path}").parse().ok()
}

fn same_origin(a: &Uri, b: &Uri) -> bool {
    a.scheme() == b.scheme() && a.authority() == b.authority()
}

/// The system's CA certificates. None found leaves https unusable but plain
/// http working, so it is logged rather than fatal.
fn native_roots() -> rustls::RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!("reading the system's CA certificates: {e}");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!("{ignored} of the system's CA certificates could not be parsed");
    }
    if roots.is_empty() {
        tracing::warn!("no CA certificates found: https sources will fail");
    }
    roots
}

/// An error with its causes: hyper's own text is often just "client error".
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().expect("uri")
    }

    #[test]
    fn redirects_resolve_against_the_answering_url() {
        let base = uri("https://huggingface.co/org/m/resolve/main/a/b.bin");
        let j = |t: &str| join(&base, t).map(|u| u.to_string());
        assert_eq!(
            j("https://cdn.example/x?sig=1").as_deref(),
            Some("https://cdn.example/x?sig=1")
        );
        assert_eq!(
            j("/api/x?cursor=2").as_deref(),
            Some("https://huggingface.co/api/x?cursor=2")
        );
        assert_eq!(
            j("//cdn.example/y").as_deref(),
            Some("https://cdn.example/y")
        );
        assert_eq!(
            j("c.bin").as_deref(),
            Some("https://huggingface.co/org/m/resolve/main/a/c.bin")
        );
    }

    #[test]
    fn the_token_goes_to_the_first_origin_only() {
        let first = uri("https://huggingface.co/a");
        assert!(same_origin(&uri("https://huggingface.co/b"), &first));
        assert!(!same_origin(&uri("https://cdn.example/b"), &first));
        assert!(!same_origin(&uri("http://huggingface.co/b"), &first));
        assert!(!same_origin(&uri("https://huggingface.co:8443/b"), &first));
    }

    #[test]
    fn statuses_sort_into_retry_or_give_up() {
        let u = "https://h/f?X-Amz-Signature=secret";
        assert_eq!(check_status(u, StatusCode::PARTIAL_CONTENT), Ok(()));
        for s in [
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::NOT_FOUND,
        ] {
            match check_status(u, s) {
                Err(Failure::Permanent(m)) => {
                    assert!(m.contains(s.as_str()), "{m}");
                    assert!(!m.contains("secret"), "{m}");
                }
                other => panic!("{s}: {other:?}"),
            }
        }
        for s in [StatusCode::BAD_GATEWAY, StatusCode::TOO_MANY_REQUESTS] {
            assert!(matches!(check_status(u, s), Err(Failure::Retryable(_))));
        }
    }
}
