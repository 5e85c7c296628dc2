//! `modelservice-operator fetch`: downloads a model's weights into the
//! cache volume, as the container of the Job the operator creates.
//!
//! The steps, each in its own file: list the source's files
//! ([`listing`]; [`s3`] for S3, with its request signing), clear old
//! revisions and refuse what cannot fit ([`space`]), download each file
//! with resume and verification ([`download`]), report progress on stdout
//! ([`progress`]), mark the directory complete ([`marker`]), and end with a
//! termination message and an exit code the operator reads ([`outcome`]).
//!
//! Every run is a restart as far as the volume goes: what an earlier pod
//! left (complete files, parts, the marker) is used, never trusted blindly
//! and never downloaded twice.

mod client;
mod download;
mod listing;
pub mod marker;
pub mod outcome;
pub mod progress;
mod retry;
mod s3;
pub mod space;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::core::model_source::{self, Source};
use client::{Auth, Client};
use download::OnDisk;
use listing::RemoteFile;
pub use marker::MARKER;
use marker::Marker;
use outcome::Failure;
pub use outcome::{EXIT_FAILED, EXIT_PERMANENT, EXIT_VOLUME_TOO_SMALL, Outcome, OutcomeKind};
pub use progress::{Progress, ProgressLine};
use progress::{Reporter, Tracker};
pub use s3::S3Config;
pub use space::{Room, human_bytes};

/// What to fetch and where: the command line and the environment.
#[derive(Clone)]
pub struct FetchRequest {
    /// The source URI (`hf://org/name@rev`, `s3://bucket/prefix` or
    /// `https://…#sha256=…`).
    pub source: String,
    /// The cache volume's mount path.
    pub dest: PathBuf,
    /// The source's directory under `dest`.
    pub key: String,
    /// The claim's size in bytes.
    pub capacity: u64,
    /// Other directories under `dest` that must survive (revisions still served).
    pub keep: Vec<String>,
    /// Base URL of the Hugging Face hub (`HF_ENDPOINT`).
    pub hf_endpoint: String,
    /// Sent to the Hugging Face endpoint only (`HF_TOKEN`).
    pub hf_token: Option<String>,
    /// Sent to an http(s) source's host only (`BEARER_TOKEN`).
    pub bearer_token: Option<String>,
    /// Keys, region and endpoint of an s3:// source (`AWS_*`).
    pub s3: S3Config,
}

// By hand, so that a logged request never shows a token.
impl std::fmt::Debug for FetchRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchRequest")
            .field("source", &self.source)
            .field("dest", &self.dest)
            .field("key", &self.key)
            .field("capacity", &self.capacity)
            .field("keep", &self.keep)
            .field("hf_endpoint", &self.hf_endpoint)
            .field("hf_token", &self.hf_token.as_ref().map(|_| "<set>"))
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "<set>"))
            .field("s3", &self.s3)
            .finish()
    }
}

/// Timings, defaulted for production; tests shorten them.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// The waits before each in-process retry of a transient failure; their
    /// number is the number of retries.
    pub retry_delays: Vec<Duration>,
    pub connect_timeout: Duration,
    /// No byte for this long fails the attempt.
    pub stall_timeout: Duration,
    pub progress_interval: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            retry_delays: [1, 2, 4, 8, 16].map(Duration::from_secs).to_vec(),
            connect_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(60),
            progress_interval: Duration::from_secs(2),
        }
    }
}

/// Runs a fetch: progress lines to `out`, the outcome to `termination_log`.
/// Returns the process's exit code (0, [`EXIT_FAILED`],
/// [`EXIT_VOLUME_TOO_SMALL`] or [`EXIT_PERMANENT`]).
pub async fn run<W: Write>(
    req: &FetchRequest,
    opts: &FetchOptions,
    out: &mut W,
    termination_log: &Path,
) -> i32 {
    let tracker = Tracker::default();
    let mut reporter = Reporter::new(out, &tracker);
    let (outcome, code) = match fetch(req, opts, &tracker, &mut reporter).await {
        Ok(done) => {
            tracing::info!(
                "{} complete: {} files, {}, {} downloaded by this run",
                req.source,
                done.files,
                human_bytes(done.bytes),
                human_bytes(tracker.fetched())
            );
            (
                Outcome::complete(done.bytes, done.files, tracker.fetched()),
                0,
            )
        }
        Err(Failure::NoRoom(room)) => {
            tracing::error!("volume too small: {}", room.message());
            (
                Outcome::volume_too_small(room.total, room.needed, room.available, room.message()),
                EXIT_VOLUME_TOO_SMALL,
            )
        }
        Err(f) => {
            tracing::error!("{}", f.message());
            (Outcome::failed(f.message()), f.exit_code())
        }
    };
    outcome.write(termination_log);
    code
}

/// What a finished fetch holds.
struct Done {
    files: u32,
    bytes: u64,
}

async fn fetch<W: Write>(
    req: &FetchRequest,
    opts: &FetchOptions,
    tracker: &Tracker,
    reporter: &mut Reporter<'_, W>,
) -> Result<Done, Failure> {
    let source = model_source::parse(&req.source)
        .map_err(|e| Failure::Permanent(format!("source {:?}: {e}", req.source)))?;
    check_key(&req.key)?;
    let dir = req.dest.join(&req.key);
    if let Some(m) = marker::read(&dir).filter(|m| m.source == req.source) {
        tracker.start(m.bytes, m.files, m.bytes, m.files);
        reporter.print();
        return Ok(Done {
            files: m.files,
            bytes: m.bytes,
        });
    }

    let (client, mut files) = list(req, opts, &source).await?;
    space::prune(&req.dest, &req.key, &req.keep).map_err(|e| download::local(&req.dest, e))?;
    let total_files = u32::try_from(files.len())
        .map_err(|_| Failure::Permanent("the source lists too many files".into()))?;
    let (total, present, complete) = tally(&dir, &files);
    tracker.start(total, total_files, present, complete);
    let room = measure(req, total, present);
    if !room.fits() {
        return Err(Failure::NoRoom(room));
    }
    std::fs::create_dir_all(&dir).map_err(|e| download::local(&dir, e))?;
    marker::remove(&dir).map_err(|e| download::local(&dir, e))?;
    tracing::info!(
        "{}: {total_files} files, {} ({} on the volume already)",
        req.source,
        human_bytes(total),
        human_bytes(present)
    );

    let downloaded = with_progress(
        download_all(&client, &dir, &mut files, tracker, opts),
        reporter,
        opts.progress_interval,
    )
    .await;
    match downloaded {
        Err(Failure::DiskFull(msg)) => {
            tracing::warn!("{msg}");
            let (total, present, _) = tally(&dir, &files);
            return Err(Failure::NoRoom(measure(req, total, present)));
        }
        other => other?,
    }

    let bytes = files.iter().filter_map(|f| f.size).sum();
    let marker = Marker {
        source: req.source.clone(),
        revision: source.revision().unwrap_or_default().to_string(),
        files: total_files,
        bytes,
    };
    marker::write(&dir, &marker).map_err(|e| download::local(&dir, e))?;
    Ok(Done {
        files: total_files,
        bytes,
    })
}

/// The source's files and a client holding the credentials for its host,
/// with the listing's transient failures retried.
async fn list(
    req: &FetchRequest,
    opts: &FetchOptions,
    source: &Source,
) -> Result<(Client, Vec<RemoteFile>), Failure> {
    let auth = match source {
        Source::HuggingFace { .. } => Auth::bearer(req.hf_token.clone()),
        Source::Http { .. } => Auth::bearer(req.bearer_token.clone()),
        // Without keys, a public bucket: unsigned requests.
        Source::S3 { .. } => req.s3.signer()?.map_or(Auth::Anonymous, Auth::SigV4),
        Source::Claim { .. } => {
            return Err(Failure::Permanent(
                "a pvc:// source is mounted as it is, there is nothing to fetch".into(),
            ));
        }
    };
    let client = Client::new(auth, opts.connect_timeout, opts.stall_timeout)?;
    let mut retries = retry::Retries::new(&opts.retry_delays);
    loop {
        let listed = match source {
            Source::HuggingFace { repo, revision } => {
                listing::hugging_face(&client, &req.hf_endpoint, repo, revision).await
            }
            Source::Http { url, sha256 } => listing::http_file(&client, url, sha256)
                .await
                .map(|f| vec![f]),
            Source::S3 { bucket, prefix } => s3::list(&client, &req.s3, bucket, prefix).await,
            Source::Claim { .. } => Ok(Vec::new()),
        };
        match listed {
            Ok(files) => return Ok((client, files)),
            Err(e) if retries.again(&e).await => {}
            Err(e) => return Err(retries.exhausted(e)),
        }
    }
}

/// Runs `work` with a progress line at its start, every `every`, and at
/// its end.
async fn with_progress<T, W: Write>(
    work: impl Future<Output = T>,
    reporter: &mut Reporter<'_, W>,
    every: Duration,
) -> T {
    reporter.print();
    tokio::pin!(work);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let out = loop {
        tokio::select! {
            out = &mut work => break out,
            _ = tick.tick() => reporter.print(),
        }
    };
    reporter.print();
    out
}

async fn download_all(
    client: &Client,
    dir: &Path,
    files: &mut [RemoteFile],
    tracker: &Tracker,
    opts: &FetchOptions,
) -> Result<(), Failure> {
    for file in files {
        download::fetch(client, dir, file, tracker, &opts.retry_delays).await?;
    }
    Ok(())
}

/// `(total bytes, bytes on the volume, complete files)`; a part counts its
/// length, up to the file's size.
fn tally(dir: &Path, files: &[RemoteFile]) -> (u64, u64, u32) {
    let mut total = 0u64;
    let mut present = 0u64;
    let mut complete = 0u32;
    for f in files {
        total = total.saturating_add(f.size.unwrap_or(0));
        match download::on_disk(dir, f) {
            OnDisk::Complete(len) => {
                present = present.saturating_add(len);
                complete += 1;
            }
            OnDisk::Partial(len) => {
                present = present.saturating_add(f.size.map_or(len, |s| len.min(s)));
            }
            OnDisk::Missing => {}
        }
    }
    (total, present, complete)
}

/// The room for the rest of the model. A volume that cannot even be
/// measured is reported as having no room, with the error logged.
fn measure(req: &FetchRequest, total: u64, present: u64) -> Room {
    let needed = total.saturating_sub(present);
    space::measure(&req.dest, req.capacity, total, needed).unwrap_or_else(|e| {
        tracing::warn!("cannot measure {}: {e}", req.dest.display());
        Room {
            total,
            needed,
            available: 0,
            capacity: req.capacity,
        }
    })
}

/// The key names one directory right under `dest`, never a path.
fn check_key(key: &str) -> Result<(), Failure> {
    if key.is_empty() || key == "." || key == ".." || key.contains(['/', '\0']) {
        return Err(Failure::Permanent(format!(
            "--key {key:?} must be one directory name"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_single_names() {
        for k in ["", ".", "..", "a/b", "/a", "a\0"] {
            assert!(check_key(k).is_err(), "{k:?}");
        }
        assert!(check_key("Llama-3.1-8B-abc123-0123456789ab").is_ok());
    }

    #[test]
    fn tally_counts_complete_files_fully_and_parts_by_length() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a"), [0u8; 10]).expect("write");
        std::fs::write(dir.path().join("b.part"), [0u8; 4]).expect("write");
        std::fs::write(dir.path().join("c.part"), [0u8; 9]).expect("write");
        let f = |p: &str, size| RemoteFile {
            path: p.into(),
            url: String::new(),
            size,
            sha256: None,
        };
        let files = [
            f("a", Some(10)),
            f("b", Some(8)),
            f("c", Some(5)),
            f("d", None),
        ];
        assert_eq!(tally(dir.path(), &files), (23, 10 + 4 + 5, 1));
    }

    #[test]
    fn the_debug_form_hides_tokens() {
        let req = FetchRequest {
            source: "hf://o/m@r".into(),
            dest: "/cache".into(),
            key: "k".into(),
            capacity: 1,
            keep: vec![],
            hf_endpoint: "https://huggingface.co".into(),
            hf_token: Some("hf_secret".into()),
            bearer_token: Some("bearer_secret".into()),
            s3: S3Config {
                access_key_id: Some("AKID".into()),
                secret_access_key: Some("aws_secret".into()),
                session_token: Some("session_secret".into()),
                region: None,
                endpoint: None,
            },
        };
        let shown = format!("{req:?}");
        for secret in ["hf_secret", "bearer_secret", "aws_secret", "session_secret"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert_eq!(shown.matches("<set>").count(), 4, "{shown}");
    }
}
