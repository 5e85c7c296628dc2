//! The HTTPS server: `POST /convert` (the API server's conversion calls) and
//! `GET /healthz`, axum routes served by hyper behind a TLS listener.
//!
//! The webhook shares its process with the controller, so a client that
//! could make it run out of memory or tasks would take the controller down
//! too. Only the API server has a reason to call it (the chart's
//! NetworkPolicy admits nothing else), but every cost a caller can impose is
//! bounded here anyway, each by one limit below:
//! - the body ([`MAX_BODY`]), refused with 413 before it is read past the limit;
//! - connections ([`MAX_CONNECTIONS`]): one more is closed at once, so the
//!   accept loop never waits and a flood cannot queue the API server behind it;
//! - the TLS handshake ([`HANDSHAKE_TIMEOUT`]), in its own task;
//! - the request headers and the idle time between requests on a kept-alive
//!   connection ([`HEADER_TIMEOUT`]: hyper starts it when it waits for a
//!   request head, so a slowloris client and an idle one are both closed);
//! - the whole request, body included ([`REQUEST_TIMEOUT`]);
//! - conversions at once ([`MAX_CONVERSIONS`]): they are CPU work, kept off
//!   the threads that serve connections.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use super::tls::{ServingCert, server_config};
use super::{Convert, WebhookError, review};

/// The largest review body accepted. Measured on the real API server
/// (1.32), it sends one object per review, even when it converts a list:
/// a listing of 200 ModelServices in v1alpha1 made 200 reviews of 2 to
/// 3.8 KiB each (BENCHMARKS.md, "What the API server sends the webhook").
/// The largest object it accepts at all is its 3 MiB request limit, so
/// 8 MiB holds any single object with room, or about 2,000 typical ones
/// should some path batch them, and bounds what one request may make the
/// webhook hold (the body, then its JSON tree a few times its size).
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// Connections at once, handshakes included. The API server keeps a few.
pub const MAX_CONNECTIONS: usize = 512;
/// A client that has not finished its TLS handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to send a request's headers, and the most a kept-alive connection
/// may sit idle before its next request.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a whole request, body and conversion included: the API server
/// gives up on a conversion webhook after 30 s.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Conversions running at once; more wait (within [`REQUEST_TIMEOUT`]).
pub const MAX_CONVERSIONS: usize = 2;
/// How long a stopping server waits for open requests.
const DRAIN: Duration = Duration::from_secs(10);

/// The webhook's routes, without TLS, so tests can call them in-process.
pub fn router(convert: Convert) -> Router {
    let conversions = Arc::new(Semaphore::new(MAX_CONVERSIONS));
    Router::new()
        .route("/convert", post(convert_handler))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(deadline))
        .with_state((convert, conversions))
}

/// Ends a request that takes longer than [`REQUEST_TIMEOUT`] (a body sent
/// a byte at a time, say) with 408, and refuses one whose announced length
/// is over [`MAX_BODY`] before reading any of it (the body limit alone
/// would read up to the limit first). A body without a length is cut at
/// the limit while it is read.
async fn deadline(request: Request, next: Next) -> Response {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a review may be at most {MAX_BODY} bytes"),
        )
            .into_response();
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (StatusCode::REQUEST_TIMEOUT, "request took too long").into_response(),
    }
}

async fn convert_handler(
    State((convert, conversions)): State<(Convert, Arc<Semaphore>)>,
    body: Bytes,
) -> Response {
    let Ok(_turn) = conversions.acquire_owned().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response();
    };
    debug!(bytes = body.len(), "conversion review");
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
/// each handshake, until `shutdown` resolves (then open requests finish,
/// for at most a few seconds).
pub fn serve(
    listener: TcpListener,
    cert: Arc<ServingCert>,
    convert: Convert,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Server, WebhookError> {
    let addr = listener.local_addr().map_err(WebhookError::Io)?;
    let acceptor = TlsAcceptor::from(server_config(cert).map_err(WebhookError::Tls)?);
    info!(%addr, "serving the conversion webhook (HTTPS, /convert)");
    let task = tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let (stopping, stop) = watch::channel(false);
        let connections = Connections {
            tls: acceptor,
            routes: router(convert),
            stop,
        };
        tokio::select! {
            () = accept_loop(listener, connections, slots.clone()) => {}
            () = shutdown => {}
        }
        // The listener is dropped with the accept loop: the port is free.
        let _ = stopping.send(true);
        let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
        if tokio::time::timeout(DRAIN, slots.acquire_many(all))
            .await
            .is_err()
        {
            warn!("conversion webhook: open connections did not finish in time");
        }
        info!("conversion webhook server stopped");
    });
    Ok(Server { addr, task })
}

/// What serving one connection needs.
#[derive(Clone)]
struct Connections {
    tls: TlsAcceptor,
    routes: Router,
    stop: watch::Receiver<bool>,
}

async fn accept_loop(tcp: TcpListener, connections: Connections, slots: Arc<Semaphore>) {
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "webhook: too many connections; closing this one");
            continue;
        };
        tokio::spawn(connections.clone().serve(stream, peer, slot));
    }
}

/// Resolves once the server is stopping.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

impl Connections {
    /// Handshakes and serves one connection, holding its `slot` throughout.
    async fn serve(mut self, stream: TcpStream, peer: SocketAddr, slot: OwnedSemaphorePermit) {
        let _slot = slot;
        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.tls.accept(stream)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return debug!(%peer, error = %e, "webhook: TLS handshake failed"),
            Err(_) => return debug!(%peer, "webhook: TLS handshake timed out"),
        };
        let service = TowerToHyperService::new(self.routes);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(64 * 1024);
        let conn = http.serve_connection(TokioIo::new(tls), service);
        tokio::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            () = stopped(&mut self.stop) => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            debug!(%peer, error = %e, "webhook: connection ended");
        }
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
