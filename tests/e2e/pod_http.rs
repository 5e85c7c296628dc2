//! Plain HTTP to a pod or a Service from the test process: on the real node
//! the host reaches pod IPs through the CNI bridge and ClusterIPs through
//! kube-proxy's rules, as a client in the cluster would.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Sends `method path` with an optional JSON body to `host:port`; the status
/// and the body parsed as JSON (`Value::Null` when it is not JSON), or why
/// it failed.
pub async fn call(
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Value), String> {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("connect {host}:{port}: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(conn);
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("{host}:{port}"))
            .header("content-type", "application/json")
            .body(Full::new(axum::body::Bytes::from(bytes)))
            .map_err(|e| format!("request: {e}"))?;
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = res.status().as_u16();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("{method} {host}:{port}{path}: no answer within {timeout:?}"))?
}
