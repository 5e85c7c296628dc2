//! The conversion webhook against hostile clients (issue 24): a body over
//! the limit is refused without being read into memory, and clients that
//! open connections and say nothing, or send their headers a byte at a
//! time, do not hold up the API server's review.
//!
//! In a file of its own, its tests one at a time: the memory check reads
//! this process's RSS, which other tests running beside it would move.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use modelservice_operator::webhook::certs::{self, KeyedCert, Sans};
use modelservice_operator::webhook::server::{
    HANDSHAKE_TIMEOUT, HEADER_TIMEOUT, MAX_BODY, Server, serve,
};
use modelservice_operator::webhook::tls::{ServingCert, provider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;

fn set_version(mut o: Value, to: &str) -> Result<Value, String> {
    o["apiVersion"] = Value::String(to.into());
    Ok(o)
}

async fn start() -> (Server, KeyedCert, tokio::sync::oneshot::Sender<()>) {
    let now = time::OffsetDateTime::now_utc();
    let ca = certs::new_ca(now).expect("CA");
    let leaf = certs::issue_serving(&ca, &Sans::for_host("127.0.0.1"), now).expect("serving");
    let cert = Arc::new(ServingCert::new(&leaf.cert_pem, &leaf.key_pem).expect("cert"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = serve(listener, cert, set_version, async move {
        let _ = stopped.await;
    })
    .expect("serves");
    (server, ca, stop)
}

/// A TLS connection that trusts only `ca`, as the API server trusts only
/// the `caBundle`.
async fn tls(addr: SocketAddr, ca: &KeyedCert) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA added");
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .expect("TLS handshake")
}

/// One small review, as the API server sends it; its status and reply.
async fn review(addr: SocketAddr, ca: &KeyedCert) -> (u16, Value) {
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls(addr, ca).await))
            .await
            .expect("HTTP handshake");
    tokio::spawn(conn);
    let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u", "desiredAPIVersion": "serving.modelservice.dev/v1",
            "objects": [{"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
                "metadata": {"name": "a", "namespace": "ml"}}]}});
    let req = http::Request::post("/convert")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let res = sender.send_request(req).await.expect("response");
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The tests of this file one at a time: the memory check reads this
/// process's RSS, which the other test's 200 connections would move.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused_without_being_read() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (server, ca, stop) = start().await;
    const MIB: usize = 1024 * 1024;
    let size = 60 * MIB;
    assert!(size > MAX_BODY);
    // Warm up first: the first connection and conversion set up TLS, the
    // runtime's threads and their buffers, which are not the body's.
    assert_eq!(review(server.addr, &ca).await.0, 200);
    let before = rss();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls(server.addr, &ca).await))
            .await
            .expect("HTTP handshake");
    tokio::spawn(conn);
    // A body announced as 60 MiB, of which nothing comes: the answer must
    // come from the announced length, before any of the body is read (a
    // server that reads it would wait here for ever, and one that reads a
    // whole 60 MiB body holds it in memory).
    let chunks = futures::stream::pending::<Result<Frame<Bytes>, std::io::Error>>();
    let req = http::Request::post("/convert")
        .header("host", server.addr.to_string())
        .header("content-type", "application/json")
        .header("content-length", size.to_string())
        .body(StreamBody::new(chunks))
        .expect("request");
    let res = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .expect("answered without waiting for the body")
        .expect("a response");
    assert_eq!(res.status().as_u16(), 413, "refused as too large");
    let grown = rss().saturating_sub(before);
    eprintln!("RSS grew by {} KiB", grown / 1024);
    assert!(
        grown < 8 * MIB as u64,
        "the body was not read into memory: RSS grew by {grown} bytes"
    );
    let (status, reply) = review(server.addr, &ca).await;
    assert_eq!(status, 200, "and the webhook still serves");
    assert_eq!(reply["response"]["result"]["status"], "Success");
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_clients_do_not_hold_up_a_review() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (server, ca, stop) = start().await;
    // 200 connections that never start TLS.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // A slowloris: TLS done, then a request head a byte every 100 ms.
    let mut slow = tls(server.addr, &ca).await;
    let slow_writer = tokio::spawn(async move {
        for b in b"POST /convert HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n".iter() {
            let byte = [*b];
            let sent = std::future::poll_fn(|cx| {
                let mut s = std::pin::Pin::new(&mut slow);
                match s.as_mut().poll_write(cx, &byte) {
                    std::task::Poll::Ready(Ok(_)) => s.poll_flush(cx),
                    other => other.map(|r| r.map(|_| ())),
                }
            })
            .await;
            if sent.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let t = Instant::now();
    let (status, reply) = review(server.addr, &ca).await;
    let took = t.elapsed();
    eprintln!("a review beside 200 idle connections and a slowloris: {took:?}");
    assert_eq!(status, 200);
    assert_eq!(reply["response"]["result"]["status"], "Success");
    assert!(
        took < HANDSHAKE_TIMEOUT,
        "the review waited for the stalled clients ({took:?})"
    );
    slow_writer.abort();
    drop(idle);
    let _ = stop.send(());
}

/// A connection that stops mid-headers, and one that says nothing after its
/// handshake, are closed by the server once [`HEADER_TIMEOUT`] has passed:
/// neither holds a task and a socket for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_are_closed_after_the_header_timeout() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (server, ca, stop) = start().await;
    let mut silent = tls(server.addr, &ca).await;
    let mut half = tls(server.addr, &ca).await;
    let head = b"POST /convert HTTP/1.1\r\nhost: x\r\n";
    std::future::poll_fn(|cx| {
        let mut h = std::pin::Pin::new(&mut half);
        match h.as_mut().poll_write(cx, head) {
            std::task::Poll::Ready(Ok(_)) => h.poll_flush(cx),
            other => other.map(|r| r.map(|_| ())),
        }
    })
    .await
    .expect("half a request head");
    let t = Instant::now();
    for (what, conn) in [("silent", &mut silent), ("half a head", &mut half)] {
        let closed = tokio::time::timeout(HEADER_TIMEOUT + Duration::from_secs(5), async {
            let mut buf = [0u8; 1024];
            loop {
                let mut rb = ReadBuf::new(&mut buf);
                let read = std::future::poll_fn(|cx| {
                    std::pin::Pin::new(&mut *conn).poll_read(cx, &mut rb)
                })
                .await;
                // EOF, a reset, or the server's 408: the server let go.
                if read.is_err() || rb.filled().is_empty() {
                    return;
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the {what} connection is still open after {:?}",
            t.elapsed()
        );
    }
    let _ = stop.send(());
}
