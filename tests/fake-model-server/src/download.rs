//! What a server without a weights cache does on every start: fetch the
//! model from the hub before loading it (`FAKE_DOWNLOAD`, the URLs of its
//! files). Only the time matters to the tests that compare it with a
//! cache, so the bytes are counted, not kept.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Downloads every `http://host:port/path` URL in turn; the body bytes.
pub async fn fetch_all(urls: &[String]) -> Result<u64, String> {
    let mut total = 0;
    for url in urls {
        total += fetch(url).await.map_err(|e| format!("{url}: {e}"))?;
    }
    Ok(total)
}

async fn fetch(url: &str) -> Result<u64, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are fetched")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut conn = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = Vec::new();
    let mut body = 0u64;
    loop {
        let n = conn.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        if body == 0 && !head.ends_with(b"\r\n\r\n") {
            head.extend_from_slice(&buf[..n]);
            if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                let status = String::from_utf8_lossy(&head[..head.len().min(12)]).to_string();
                if !status.contains(" 200") {
                    return Err(format!("answered {status:?}"));
                }
                body = (head.len() - end - 4) as u64;
                head.truncate(end + 4);
            }
        } else {
            body += n as u64;
        }
    }
    Ok(body)
}
