//! The HTTPS server: `POST /convert` (the API server's conversion calls) and
//! `GET /healthz`, on axum behind a TLS listener.
//!
//! axum's own `serve` does the HTTP part (keep-alive, graceful shutdown);
//! TLS is an [`axum::serve::Listener`] that hands over connections whose
//! handshake is done, so no extra server crate is needed. Handshakes run in
//! their own tasks, with a timeout, so a slow or silent client never holds up
//! the API server's next connection.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};

use super::tls::{ServingCert, server_config};
use super::{Convert, WebhookError, review};

/// The API server sends a list's objects in one review, so the body can be
/// far larger than one object (the API server's own limit is 3 MiB per
/// object); axum's 2 MiB default would fail lists of a few hundred.
pub const MAX_BODY: usize = 64 * 1024 * 1024;
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in flight at once; more wait for a slot.
const MAX_HANDSHAKES: usize = 128;

/// The webhook's routes, without TLS, so tests can call them in-process.
pub fn router(convert: Convert) -> Router {
    Router::new()
        .route("/convert", post(convert_handler))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(convert)
}

async fn convert_handler(State(convert): State<Convert>, body: Bytes) -> Response {
    // Parsing and converting a long list is CPU work: keep it off the
    // threads that serve the API server's other connections.
    match tokio::task::spawn_blocking(move || review::handle(&body, convert)).await {
        Ok(review) => match serde_json::to_vec(&review) {
            Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The running server: the address it listens on (the real port when 0
/// was asked for) and its task, which ends after shutdown.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    pub task: JoinHandle<()>,
}

/// Serves the webhook on `listener` with the certificate `cert` holds at
/// each handshake, until `shutdown` resolves (then open requests finish).
pub fn serve(
    listener: TcpListener,
    cert: Arc<ServingCert>,
    convert: Convert,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Server, WebhookError> {
    let addr = listener.local_addr().map_err(WebhookError::Io)?;
    let acceptor = TlsAcceptor::from(server_config(cert).map_err(WebhookError::Tls)?);
    let listener = TlsListener::new(listener, acceptor, addr);
    info!(%addr, "serving the conversion webhook (HTTPS, /convert)");
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(convert))
            .with_graceful_shutdown(shutdown)
            .await
        {
            warn!(error = %e, "conversion webhook server failed");
        }
        info!("conversion webhook server stopped");
    });
    Ok(Server { addr, task })
}

/// TCP connections in, finished TLS connections out (see the module doc).
struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl TlsListener {
    fn new(tcp: TcpListener, tls: TlsAcceptor, addr: SocketAddr) -> TlsListener {
        let (tx, ready) = mpsc::channel(MAX_HANDSHAKES);
        let acceptor = tokio::spawn(accept_loop(tcp, tls, tx));
        TlsListener {
            ready,
            addr,
            acceptor,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        // Stops accepting (and frees the port) when the server stops.
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

async fn accept_loop(
    tcp: TcpListener,
    tls: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                warn!(error = %e, "webhook: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tls, ready) = (tls.clone(), ready.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                Ok(Ok(conn)) => {
                    let _ = ready.send((conn, peer)).await;
                }
                Ok(Err(e)) => debug!(%peer, error = %e, "webhook: TLS handshake failed"),
                Err(_) => debug!(%peer, "webhook: TLS handshake timed out"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::certs::{self, KeyedCert, Sans};
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use serde_json::{Value, json};

    fn set_version(mut o: Value, to: &str) -> Result<Value, String> {
        o["apiVersion"] = Value::String(to.into());
        Ok(o)
    }

    fn ca() -> KeyedCert {
        certs::new_ca(time::OffsetDateTime::now_utc()).expect("CA")
    }

    fn serving(ca: &KeyedCert) -> KeyedCert {
        let now = time::OffsetDateTime::now_utc();
        certs::issue_serving(ca, &Sans::for_host("127.0.0.1"), now).expect("serving")
    }

    struct Reply {
        status: u16,
        body: Vec<u8>,
        /// The leaf certificate the server presented.
        leaf: CertificateDer<'static>,
    }

    /// One HTTPS request with a client that trusts only `ca_pem`, as the
    /// API server trusts only `caBundle`, and checks the IP SAN.
    async fn request(
        addr: SocketAddr,
        ca_pem: &str,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> std::io::Result<Reply> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.expect("CA PEM")).expect("CA added");
        }
        let config = rustls::ClientConfig::builder_with_provider(crate::webhook::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await?;
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .cloned()
            .expect("the server presents a certificate");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let res = sender
            .send_request(req)
            .await
            .map_err(std::io::Error::other)?;
        let status = res.status().as_u16();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes()
            .to_vec();
        Ok(Reply { status, body, leaf })
    }

    fn leaf_of(cert: &KeyedCert) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).expect("leaf")
    }

    async fn start(
        serving: &KeyedCert,
    ) -> (Server, Arc<ServingCert>, tokio::sync::oneshot::Sender<()>) {
        let cert = Arc::new(ServingCert::new(&serving.cert_pem, &serving.key_pem).expect("cert"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = serve(listener, cert.clone(), set_version, async move {
            let _ = stopped.await;
        })
        .expect("serves");
        (server, cert, stop)
    }

    #[tokio::test]
    async fn converts_over_https_with_a_client_that_trusts_only_our_ca() {
        let ca = ca();
        let (server, _, stop) = start(&serving(&ca)).await;
        assert_ne!(server.addr.port(), 0, "the bound port is exposed");

        let review = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "abc", "desiredAPIVersion": "serving.modelservice.dev/v1beta1",
                "objects": [{"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
                             "metadata": {"name": "a", "namespace": "ml"}}]}
        });
        let reply = request(
            server.addr,
            &ca.cert_pem,
            "POST",
            "/convert",
            serde_json::to_vec(&review).expect("json"),
        )
        .await
        .expect("HTTPS request");
        assert_eq!(reply.status, 200);
        let out: Value = serde_json::from_slice(&reply.body).expect("JSON reply");
        assert_eq!(out["kind"], "ConversionReview");
        assert_eq!(out["response"]["uid"], "abc");
        assert_eq!(out["response"]["result"]["status"], "Success");
        assert_eq!(
            out["response"]["convertedObjects"][0]["apiVersion"],
            "serving.modelservice.dev/v1beta1"
        );

        let health = request(server.addr, &ca.cert_pem, "GET", "/healthz", Vec::new())
            .await
            .expect("healthz");
        assert_eq!((health.status, health.body.as_slice()), (200, &b"ok"[..]));

        // A client that trusts another CA refuses the server.
        assert!(
            request(
                server.addr,
                &self::ca().cert_pem,
                "GET",
                "/healthz",
                Vec::new()
            )
            .await
            .is_err()
        );

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(10), server.task)
            .await
            .expect("stops on shutdown")
            .expect("joins");
        assert!(TcpStream::connect(server.addr).await.is_err(), "port freed");
    }

    #[tokio::test]
    async fn a_replaced_certificate_is_served_without_a_restart() {
        let old_ca = ca();
        let old = serving(&old_ca);
        let (server, cert, stop) = start(&old).await;
        let before = request(server.addr, &old_ca.cert_pem, "GET", "/healthz", Vec::new())
            .await
            .expect("old certificate served");
        assert_eq!(before.leaf, leaf_of(&old));

        // A new CA too, so only the new certificate can satisfy the client.
        let new_ca = ca();
        let new = serving(&new_ca);
        assert!(cert.replace(&new.cert_pem, &new.key_pem).expect("replaced"));
        assert!(
            !cert
                .replace(&new.cert_pem, &new.key_pem)
                .expect("same again")
        );
        let after = request(server.addr, &new_ca.cert_pem, "GET", "/healthz", Vec::new())
            .await
            .expect("new certificate served");
        assert_eq!(after.status, 200);
        assert_eq!(after.leaf, leaf_of(&new));
        assert!(
            request(server.addr, &old_ca.cert_pem, "GET", "/healthz", Vec::new())
                .await
                .is_err(),
            "the old certificate is no longer served"
        );

        // A key that does not fit is refused and the current pair stays.
        assert!(cert.replace(&old.cert_pem, &new.key_pem).is_err());
        assert_eq!(cert.leaf(), Some(leaf_of(&new)));
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), server.task).await;
    }

    #[tokio::test]
    async fn large_reviews_are_accepted() {
        let ca = ca();
        let (server, _, stop) = start(&serving(&ca)).await;
        let objects: Vec<Value> = (0..3000)
            .map(|i| {
                json!({"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
                "metadata": {"name": format!("m{i}"), "namespace": "ml"},
                "spec": {"args": ["x".repeat(1000)]}})
            })
            .collect();
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "big", "desiredAPIVersion": "serving.modelservice.dev/v1beta1", "objects": objects}});
        let body = serde_json::to_vec(&review).expect("json");
        assert!(body.len() > 2 * 1024 * 1024);
        let reply = request(server.addr, &ca.cert_pem, "POST", "/convert", body)
            .await
            .expect("request");
        assert_eq!(reply.status, 200);
        let out: Value = serde_json::from_slice(&reply.body).expect("JSON");
        assert_eq!(
            out["response"]["convertedObjects"].as_array().map(Vec::len),
            Some(3000)
        );
        let _ = stop.send(());
    }
}
