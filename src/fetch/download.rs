//! One file onto the volume: resumed from its `.part`, streamed to disk,
//! verified, then renamed into place.
//!
//! Weights are tens of GiB and connections drop, so a part is never thrown
//! away unless the server or the digest proves it wrong. The rename comes
//! last: a file under its final name has been verified, so a later run
//! trusts it by its size without hashing it again.

use std::io;
use std::path::{Path, PathBuf};

use http::{HeaderMap, Method, StatusCode, header};
use http_body_util::BodyExt;
use ring::digest;
use tokio::io::{AsyncWriteExt, BufWriter};

use super::client::{self, Client};
use super::listing::{RemoteFile, content_length};
use super::outcome::Failure;
use super::progress::Tracker;
use super::retry::Retries;

/// Large enough that a 100 MB/s stream costs a few hundred writes a second.
const WRITE_BUFFER: usize = 1 << 20;

/// What the volume holds of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDisk {
    /// Under its final name, with the listed size.
    Complete(u64),
    /// A `.part` of this length.
    Partial(u64),
    Missing,
}

pub(crate) fn on_disk(dir: &Path, file: &RemoteFile) -> OnDisk {
    let path = dir.join(&file.path);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() && file.size.is_none_or(|s| s == m.len()) => {
            return OnDisk::Complete(m.len());
        }
        _ => {}
    }
    match std::fs::metadata(part_path(&path)) {
        Ok(m) if m.is_file() => OnDisk::Partial(m.len()),
        _ => OnDisk::Missing,
    }
}

/// Downloads `file` into `dir` unless it is complete, retrying transient
/// failures after the given delays. Learns the size of a file listed
/// without one.
pub(crate) async fn fetch(
    client: &Client,
    dir: &Path,
    file: &mut RemoteFile,
    tracker: &Tracker,
    delays: &[std::time::Duration],
) -> Result<(), Failure> {
    if let OnDisk::Complete(len) = on_disk(dir, file) {
        // An HTTP file listed without a size: its earlier run's file tells it.
        if file.size.is_none() {
            file.size = Some(len);
            tracker.add_total(len);
        }
        return Ok(());
    }
    let mut retries = Retries::new(delays);
    loop {
        match attempt(client, dir, file, tracker).await {
            Ok(()) => {
                tracker.file_done();
                return Ok(());
            }
            Err(e) if retries.again(&e).await => {}
            Err(e) => return Err(retries.exhausted(e)),
        }
    }
}

async fn attempt(
    client: &Client,
    dir: &Path,
    file: &mut RemoteFile,
    tracker: &Tracker,
) -> Result<(), Failure> {
    let path = dir.join(&file.path);
    let part = part_path(&path);
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| local(parent, e))?;
    }
    let f = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&part)
        .await
        .map_err(|e| local(&part, e))?;
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, f);
    let mut have = part_len(&out, &part).await?;
    if let Some(size) = file.size
        && have > size
    {
        truncate(&mut out, &part).await?;
        tracker.discarded(size);
        have = 0;
    }
    if file.size != Some(have) {
        let received = receive(client, file, &mut out, &part, &mut have, tracker).await;
        // What arrived before a failure stays, synced, for the resume.
        finish(&mut out, &part).await?;
        received?;
    } else {
        finish(&mut out, &part).await?;
    }
    drop(out);
    if let Some(size) = file.size
        && have != size
    {
        return Err(Failure::Retryable(format!(
            "{} ended after {have} of {size} bytes",
            client::redact(&file.url)
        )));
    }
    if file.size.is_none() {
        file.size = Some(have);
        tracker.add_total(have);
    }
    if let Some(expected) = &file.sha256 {
        let got = sha256_of(&part).await?;
        if &got != expected {
            tokio::fs::remove_file(&part)
                .await
                .map_err(|e| local(&part, e))?;
            tracker.discarded(have);
            return Err(Failure::Retryable(format!(
                "checksum mismatch for {}: expected sha256 {expected}, got {got}",
                file.path
            )));
        }
    }
    tokio::fs::rename(&part, &path)
        .await
        .map_err(|e| local(&path, e))
}

/// GETs the rest of the file (from `have` on) and appends it to `out`.
async fn receive(
    client: &Client,
    file: &mut RemoteFile,
    out: &mut BufWriter<tokio::fs::File>,
    part: &Path,
    have: &mut u64,
    tracker: &Tracker,
) -> Result<(), Failure> {
    let from = (*have > 0).then_some(*have);
    let resp = client.send(Method::GET, &file.url, from).await?;
    let url = client::redact(&file.url).to_string();
    let total = match resp.status() {
        // The part already holds every byte: the digest will tell.
        StatusCode::RANGE_NOT_SATISFIABLE if from.is_some() => return Ok(()),
        StatusCode::PARTIAL_CONTENT if from.is_some() => {
            let (start, total) = content_range(resp.headers()).ok_or_else(|| {
                Failure::Retryable(format!("{url} answered 206 without a Content-Range"))
            })?;
            if start != *have {
                truncate(out, part).await?;
                tracker.discarded(*have);
                *have = 0;
                return Err(Failure::Retryable(format!(
                    "{url} sent bytes from {start} when asked from {}",
                    from.unwrap_or(0)
                )));
            }
            total
        }
        StatusCode::OK => {
            if *have > 0 {
                tracing::info!("{url} ignored the range: {} starts over", file.path);
                truncate(out, part).await?;
                tracker.discarded(*have);
                *have = 0;
            }
            content_length(resp.headers())
        }
        status => {
            client::check_status(&url, status)?;
            return Err(Failure::Retryable(format!("{url} answered {status}")));
        }
    };
    if file.size.is_none()
        && let Some(total) = total
    {
        file.size = Some(total);
        tracker.add_total(total);
    }
    let stall = client.stall();
    let mut body = resp.into_body();
    loop {
        let frame = tokio::time::timeout(stall, body.frame())
            .await
            .map_err(|_| Failure::Retryable(format!("{url}: no bytes for {}s", stall.as_secs())))?;
        let Some(frame) = frame else { return Ok(()) };
        let frame = frame.map_err(|e| Failure::Retryable(format!("{url}: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let len = data.len() as u64;
        if let Some(size) = file.size
            && *have + len > size
        {
            return Err(Failure::Retryable(format!(
                "{url} sent more than the {size} bytes of {}",
                file.path
            )));
        }
        out.write_all(&data).await.map_err(|e| local(part, e))?;
        *have += len;
        tracker.wrote(len);
    }
}

/// `(first byte, total size)` of `Content-Range: bytes 100-199/200` (the
/// total may be `*`).
fn content_range(headers: &HeaderMap) -> Option<(u64, Option<u64>)> {
    let v = headers.get(header::CONTENT_RANGE)?.to_str().ok()?;
    let (range, total) = v.strip_prefix("bytes ")?.split_once('/')?;
    let (start, _) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()))
}

async fn part_len(out: &BufWriter<tokio::fs::File>, part: &Path) -> Result<u64, Failure> {
    Ok(out
        .get_ref()
        .metadata()
        .await
        .map_err(|e| local(part, e))?
        .len())
}

/// Empties the part; the file is in append mode, so writing restarts at 0.
async fn truncate(out: &mut BufWriter<tokio::fs::File>, part: &Path) -> Result<(), Failure> {
    out.flush().await.map_err(|e| local(part, e))?;
    out.get_mut().set_len(0).await.map_err(|e| local(part, e))
}

async fn finish(out: &mut BufWriter<tokio::fs::File>, part: &Path) -> Result<(), Failure> {
    out.flush().await.map_err(|e| local(part, e))?;
    out.get_mut().sync_all().await.map_err(|e| local(part, e))
}

/// The file's SHA-256 as read back from disk: part of it may come from an
/// earlier run, and the disk is what will be served.
async fn sha256_of(path: &Path) -> Result<String, Failure> {
    let owned = path.to_path_buf();
    let hashed = tokio::task::spawn_blocking(move || -> io::Result<String> {
        use std::io::Read;
        let mut f = std::fs::File::open(&owned)?;
        let mut ctx = digest::Context::new(&digest::SHA256);
        let mut buf = vec![0u8; WRITE_BUFFER];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            ctx.update(&buf[..n]);
        }
        Ok(hex(ctx.finish().as_ref()))
    })
    .await
    .map_err(|e| Failure::Fatal(format!("hashing {}: {e}", path.display())))?;
    hashed.map_err(|e| local(path, e))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn part_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".part");
    s.into()
}

/// A local I/O error: a full volume (or quota) is the room outcome, the
/// rest exit 1 for the Job to try on another pod.
pub(crate) fn local(path: &Path, e: io::Error) -> Failure {
    let msg = format!("{}: {e}", path.display());
    match rustix::io::Errno::from_io_error(&e) {
        Some(rustix::io::Errno::NOSPC | rustix::io::Errno::DQUOT) => Failure::DiskFull(msg),
        _ => Failure::Fatal(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn content_range_gives_start_and_total() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_static("bytes 100-199/200"),
        );
        assert_eq!(content_range(&h), Some((100, Some(200))));
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_static("bytes 5-9/*"),
        );
        assert_eq!(content_range(&h), Some((5, None)));
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_static("items 1-2/3"),
        );
        assert_eq!(content_range(&h), None);
    }

    #[test]
    fn a_full_volume_is_told_from_other_errors() {
        let full = io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        assert!(matches!(local(Path::new("/x"), full), Failure::DiskFull(_)));
        let quota = io::Error::from_raw_os_error(rustix::io::Errno::DQUOT.raw_os_error());
        assert!(matches!(
            local(Path::new("/x"), quota),
            Failure::DiskFull(_)
        ));
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert!(matches!(local(Path::new("/x"), denied), Failure::Fatal(_)));
    }

    #[test]
    fn on_disk_trusts_a_final_file_of_the_right_size_and_measures_parts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |path: &str, size| RemoteFile {
            path: path.into(),
            url: String::new(),
            size,
            sha256: None,
        };
        std::fs::write(dir.path().join("done"), [1u8; 10]).expect("write");
        std::fs::write(dir.path().join("half.part"), [1u8; 4]).expect("write");
        assert_eq!(
            on_disk(dir.path(), &file("done", Some(10))),
            OnDisk::Complete(10)
        );
        assert_eq!(
            on_disk(dir.path(), &file("done", None)),
            OnDisk::Complete(10)
        );
        assert_eq!(
            on_disk(dir.path(), &file("done", Some(11))),
            OnDisk::Missing
        );
        assert_eq!(
            on_disk(dir.path(), &file("half", Some(10))),
            OnDisk::Partial(4)
        );
        assert_eq!(
            on_disk(dir.path(), &file("none", Some(10))),
            OnDisk::Missing
        );
    }

    #[tokio::test]
    async fn the_digest_is_of_the_bytes_on_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").expect("write");
        assert_eq!(
            sha256_of(&p).await,
            Ok("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into())
        );
    }
}
