//! The operator's client to the API server: kube's, with the operator's own
//! retries (`api_retry`) in place of kube's, a bound on its requests in
//! flight (`in_flight`), and every request counted (`api_requests`).

use std::sync::Arc;

use super::api_requests::CountRequests;
use super::api_retry;
use super::in_flight::InFlightLayer;
use crate::metrics::Metrics;

/// The client the operator runs with; at most `in_flight` requests other
/// than watches and the Lease's are in flight at once.
pub fn client(
    mut config: kube::Config,
    metrics: Arc<Metrics>,
    in_flight: usize,
) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    // Retrying sends a request again through the service below, and the
    // bound waits before it asks the service below, which must therefore
    // be shared: kube's stack is not, a buffer in front of it is. Each try
    // of a retried request takes a permit of its own, so none is held
    // through the waits between tries.
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&tower::buffer::BufferLayer::new(api_retry::QUEUE))
        .with_layer(&InFlightLayer::new(
            in_flight,
            metrics.api_requests_waiting.clone(),
        ))
        .with_layer(&api_retry::layer())
        .with_layer(&CountRequests::new(metrics))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::WatchParams;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers its first `unavailable` requests with 503 and
    /// the rest with an empty ConfigMap list; returns its address and the
    /// count of requests it got.
    async fn server(unavailable: usize) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    // One request per connection: every answer closes it.
                    let mut buf = vec![0u8; 16 * 1024];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = if count.fetch_add(1, Ordering::SeqCst) < unavailable {
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()
                    } else {
                        let body = r#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":[]}"#;
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    let _ = conn.write_all(answer.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        (format!("http://{addr}"), seen)
    }

    fn api(url: &str) -> Api<ConfigMap> {
        let config = kube::Config::new(url.parse().expect("a URL"));
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        Api::namespaced(client(config, metrics, 4).expect("a client"), "ns")
    }

    #[tokio::test]
    async fn a_watch_refused_in_an_outage_fails_at_once() {
        // kube's own retry held it for up to 15 growing waits (minutes in
        // all), where the watcher's short backoff never saw it fail.
        let (url, seen) = server(usize::MAX).await;
        let (api, params) = (api(&url), WatchParams::default());
        let answer = tokio::time::timeout(Duration::from_secs(5), api.watch(&params, "0")).await;
        assert!(
            matches!(answer, Ok(Err(_))),
            "the watch must fail, not wait: {:?}",
            answer.map(|r| r.map(|_| ()))
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1, "tried once");
    }

    #[tokio::test]
    async fn a_read_refused_for_a_moment_is_tried_again() {
        let (url, seen) = server(2).await;
        let listed = api(&url).list(&Default::default()).await;
        assert!(listed.is_ok(), "{listed:?}");
        assert_eq!(seen.load(Ordering::SeqCst), 3, "two refusals, then served");
    }
}
