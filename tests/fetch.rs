//! `fetch` end to end, in-process, against the fake hub of
//! `fake_apiserver::weights_server` on loopback with a tempdir as the
//! volume: a download, a restart that downloads nothing, resumes within a
//! run and across runs, a volume too small, a corrupted byte, refusals,
//! an http source, the clean-up of old revisions, and s3:// sources
//! against the same server's S3 endpoints (signed requests, paging, a
//! resume, a refused key, a prefix that is one object).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use fake_apiserver::weights_server::{Bucket, Repo, WeightsServer};
use modelservice_operator::fetch::{
    self, EXIT_FAILED, EXIT_PERMANENT, EXIT_VOLUME_TOO_SMALL, FetchOptions, FetchRequest, MARKER,
    Outcome, OutcomeKind, Progress, ProgressLine, S3Config,
};
use modelservice_operator::runtime::cli::{Cli, Command};
use ring::digest;

const MIB: u64 = 1 << 20;
const REPO: &str = "org/model";
const REV: &str = "rev1";

/// What one run left: its exit code, progress lines and outcome.
struct Ran {
    code: i32,
    progress: Vec<Progress>,
    outcome: Outcome,
}

/// A volume (the tempdir) and a place for the termination log beside it.
struct Volume {
    dest: tempfile::TempDir,
    logs: tempfile::TempDir,
}

impl Volume {
    fn new() -> Self {
        Self {
            dest: tempfile::tempdir().expect("tempdir"),
            logs: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> &Path {
        self.dest.path()
    }

    fn request(&self, server: &WeightsServer, source: &str, key: &str) -> FetchRequest {
        FetchRequest {
            source: source.into(),
            dest: self.path().to_path_buf(),
            key: key.into(),
            capacity: 1 << 40,
            keep: Vec::new(),
            hf_endpoint: server.url(),
            hf_token: None,
            bearer_token: None,
            s3: S3Config::default(),
        }
    }

    /// An s3:// source on the server's S3 endpoints, signed with
    /// `(access key, secret key)` when given.
    fn s3_request(
        &self,
        server: &WeightsServer,
        source: &str,
        key: &str,
        keys: Option<(&str, &str)>,
    ) -> FetchRequest {
        FetchRequest {
            s3: S3Config {
                access_key_id: keys.map(|(id, _)| id.to_string()),
                secret_access_key: keys.map(|(_, secret)| secret.to_string()),
                session_token: None,
                region: Some(S3_REGION.into()),
                endpoint: Some(server.url()),
            },
            ..self.request(server, source, key)
        }
    }

    async fn run(&self, req: &FetchRequest, opts: &FetchOptions) -> Ran {
        let log = self.logs.path().join("termination-log");
        let _ = std::fs::remove_file(&log);
        let mut out = Vec::new();
        let code = fetch::run(req, opts, &mut out, &log).await;
        let stdout = String::from_utf8(out).expect("stdout is UTF-8");
        let progress = stdout
            .lines()
            .map(|l| {
                serde_json::from_str::<ProgressLine>(l)
                    .unwrap_or_else(|e| panic!("stdout holds only progress lines, not {l:?}: {e}"))
                    .progress
            })
            .collect();
        let message = std::fs::read_to_string(&log).expect("a termination message");
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(message.len() < 4096);
        let outcome = serde_json::from_str(message.trim()).expect("the outcome parses");
        Ran {
            code,
            progress,
            outcome,
        }
    }
}

/// Retries after milliseconds, progress every 50 ms: the production
/// timings with the waiting taken out.
fn quick(retries: usize) -> FetchOptions {
    FetchOptions {
        retry_delays: vec![Duration::from_millis(10); retries],
        connect_timeout: Duration::from_secs(5),
        stall_timeout: Duration::from_secs(10),
        progress_interval: Duration::from_millis(50),
    }
}

async fn server(repos: Vec<Repo>) -> WeightsServer {
    WeightsServer::start("127.0.0.1:0".parse().expect("addr"), repos)
        .await
        .expect("the weights server starts")
}

fn sha256_file(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("the file");
    digest::digest(&digest::SHA256, &bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn source(repo: &str) -> String {
    format!("hf://{repo}@{REV}")
}

fn resolve_path(repo: &str, file: &str) -> String {
    format!("/{repo}/resolve/{REV}/{file}")
}

fn part(p: PathBuf) -> PathBuf {
    let mut s = p.into_os_string();
    s.push(".part");
    s.into()
}

const FILES: [(&str, u64); 3] = [
    ("config.json", 2_000),
    ("weights/model-00001.safetensors", 3 * MIB),
    ("weights/model-00002.safetensors", 2 * MIB + 17),
];

#[tokio::test]
async fn downloads_verifies_marks_and_then_a_restart_downloads_nothing() {
    let srv = server(vec![Repo::new(REPO, REV, &FILES)]).await;
    srv.set_page_size(1);
    srv.set_rate_limit(8 * MIB);
    let vol = Volume::new();
    let req = vol.request(&srv, &source(REPO), "model-rev1");
    let total: u64 = FILES.iter().map(|(_, s)| s).sum();

    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    assert_eq!(ran.outcome, Outcome::complete(total, 3, total));
    assert_eq!(
        srv.request_count(&format!("/api/models/{REPO}/tree/{REV}")),
        4,
        "every page of the tree (a directory and three files) was read"
    );
    let dir = vol.path().join("model-rev1");
    for (path, size) in FILES {
        let on_disk = std::fs::read(dir.join(path)).expect("downloaded");
        let expected = srv
            .content(REPO, REV, path, 0, size as usize)
            .expect("served");
        assert!(on_disk == expected, "{path} has the served bytes");
        assert!(!part(dir.join(path)).exists(), "no part left of {path}");
    }
    let weights = "weights/model-00001.safetensors";
    assert_eq!(
        Some(sha256_file(&dir.join(weights))),
        srv.sha256(REPO, REV, weights)
    );
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(MARKER)).expect("the marker"))
            .expect("JSON");
    assert_eq!(
        marker,
        serde_json::json!({"source": source(REPO), "revision": REV, "files": 3, "bytes": total})
    );

    let p = &ran.progress;
    assert!(p.len() >= 4, "{p:?}");
    progress_climbs_to_the_total(p, total, 3);
    let fastest = p.iter().map(|l| l.bytes_per_second).max().unwrap_or(0);
    assert!(
        (MIB..=64 * MIB).contains(&fastest),
        "about 8 MiB/s is measured: {fastest}"
    );

    // A restart: the marker answers, the server sees nothing.
    srv.reset_counts();
    let again = vol.run(&req, &quick(5)).await;
    assert_eq!(again.code, 0);
    assert_eq!(again.outcome, Outcome::complete(total, 3, 0));
    assert_eq!(srv.bytes_served(), 0);
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
    assert_eq!(again.progress.len(), 1);
    assert_eq!(
        (again.progress[0].done_bytes, again.progress[0].total_bytes),
        (total, total)
    );
}

#[tokio::test]
async fn a_dropped_connection_is_resumed_in_process_with_a_range() {
    let size = 4 * MIB;
    let srv = server(vec![Repo::new(REPO, REV, &[("w.bin", size)])]).await;
    let vol = Volume::new();
    let req = vol.request(&srv, &source(REPO), "k");
    let cut = MIB + 5;
    srv.cut_next_response_after(cut);

    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    // What was in flight when the connection dropped is lost, no more.
    let (_, from) = resumed_once(&srv, &resolve_path(REPO, "w.bin"), cut);
    assert_eq!(srv.bytes_served(), cut + (size - from));
    assert!(srv.bytes_served() < 2 * size);
    assert_eq!(ran.outcome.downloaded_bytes, Some(size));
    assert_eq!(
        Some(sha256_file(&vol.path().join("k/w.bin"))),
        srv.sha256(REPO, REV, "w.bin")
    );
}

#[tokio::test]
async fn a_failed_run_leaves_its_part_and_the_next_run_resumes_it() {
    let size = 3 * MIB;
    let srv = server(vec![Repo::new(REPO, REV, &[("w.bin", size)])]).await;
    let vol = Volume::new();
    let req = vol.request(&srv, &source(REPO), "k");
    let cut = 3 * MIB / 2;
    srv.cut_next_response_after(cut);

    let failed = vol.run(&req, &quick(0)).await;
    assert_eq!(failed.code, EXIT_FAILED, "{:?}", failed.outcome);
    assert_eq!(failed.outcome.result, OutcomeKind::Failed);
    let part = part(vol.path().join("k/w.bin"));
    let kept = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    assert!(
        kept > 0 && kept <= cut,
        "the part keeps what arrived: {kept}"
    );
    assert!(!vol.path().join("k").join(MARKER).exists());

    let ran = vol.run(&req, &quick(0)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    assert_eq!(
        ran.progress[0].done_bytes, kept,
        "progress starts where it was"
    );
    assert_eq!(ran.outcome.downloaded_bytes, Some(size - kept));
    let ranges: Vec<_> = srv.requests().into_iter().filter_map(|r| r.range).collect();
    assert_eq!(ranges, [format!("bytes={kept}-")]);
    assert!(srv.bytes_served() < 2 * size);
    assert_eq!(srv.bytes_served(), cut + (size - kept));
    assert!(!part.exists());
    assert_eq!(
        Some(sha256_file(&vol.path().join("k/w.bin"))),
        srv.sha256(REPO, REV, "w.bin")
    );
}

#[tokio::test]
async fn a_model_bigger_than_the_claim_is_refused_before_any_byte() {
    let srv = server(vec![Repo::new(REPO, REV, &[("w.bin", 3 * MIB)])]).await;
    let vol = Volume::new();
    let req = FetchRequest {
        capacity: MIB,
        ..vol.request(&srv, &source(REPO), "k")
    };
    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, EXIT_VOLUME_TOO_SMALL);
    assert_eq!(ran.outcome.result, OutcomeKind::VolumeTooSmall);
    assert_eq!(ran.outcome.needed_bytes, Some(3 * MIB));
    assert_eq!(ran.outcome.available_bytes, Some(MIB));
    assert_eq!(
        ran.outcome.message.as_deref(),
        Some(
            "the model needs 3.0 MiB (3.0 MiB left to download), the claim has 1.0 MiB free of 1.0 MiB"
        )
    );
    assert_eq!(srv.bytes_served(), 0);
    assert_eq!(srv.request_count(&resolve_path(REPO, "w.bin")), 0);
    assert!(ran.progress.is_empty(), "no download started");
}

#[tokio::test]
async fn a_corrupted_byte_fails_the_checksum_and_removes_the_part() {
    let srv = server(vec![Repo::new(REPO, REV, &[("w.bin", 2 * MIB)])]).await;
    srv.corrupt("w.bin", 12_345);
    let vol = Volume::new();
    let req = vol.request(&srv, &source(REPO), "k");

    let ran = vol.run(&req, &quick(2)).await;
    assert_eq!(ran.code, EXIT_FAILED, "{:?}", ran.outcome);
    let msg = ran.outcome.message.unwrap_or_default();
    let expected = srv.sha256(REPO, REV, "w.bin").expect("digest");
    assert!(msg.contains("checksum mismatch for w.bin"), "{msg}");
    assert!(msg.contains(&expected), "{msg}");
    assert!(msg.contains("after 2 retries"), "{msg}");
    assert!(!part(vol.path().join("k/w.bin")).exists());
    assert!(!vol.path().join("k/w.bin").exists());
    assert_eq!(srv.request_count(&resolve_path(REPO, "w.bin")), 3);
    let last = ran.progress.last().copied().unwrap_or_default();
    assert_eq!(last.done_bytes, 0, "discarded bytes are not reported done");

    srv.heal();
    let healed = vol.run(&req, &quick(2)).await;
    assert_eq!(healed.code, 0, "{:?}", healed.outcome);
}

#[tokio::test]
async fn sources_that_cannot_work_exit_permanent() {
    let srv = server(vec![Repo::new(
        "org/evil",
        REV,
        &[("ok.bin", 10), ("a/../../escaped.bin", 10)],
    )])
    .await;
    let vol = Volume::new();

    let missing = vol
        .run(&vol.request(&srv, &source("org/missing"), "k"), &quick(5))
        .await;
    assert_eq!(missing.code, EXIT_PERMANENT);
    let msg = missing.outcome.message.unwrap_or_default();
    assert!(msg.contains("404"), "{msg}");
    assert_eq!(srv.requests().len(), 1, "a 404 is not retried");

    let hostile = vol
        .run(&vol.request(&srv, &source("org/evil"), "k"), &quick(5))
        .await;
    assert_eq!(hostile.code, EXIT_PERMANENT);
    let msg = hostile.outcome.message.unwrap_or_default();
    assert!(msg.contains("a/../../escaped.bin"), "{msg}");
    assert!(!vol.path().join("escaped.bin").exists());
    assert!(!vol.path().join("k/ok.bin").exists(), "nothing is fetched");

    for uri in ["pvc://weights/llama", "s3://models", "hf://org/model"] {
        let ran = vol.run(&vol.request(&srv, uri, "k"), &quick(5)).await;
        assert_eq!(ran.code, EXIT_PERMANENT, "{uri}");
        assert_eq!(ran.outcome.result, OutcomeKind::Failed);
    }
    let bad_key = vol
        .run(&vol.request(&srv, &source("org/evil"), "../x"), &quick(5))
        .await;
    assert_eq!(bad_key.code, EXIT_PERMANENT);
}

#[tokio::test]
async fn the_token_goes_to_the_hub_only_and_never_into_messages() {
    let srv = server(vec![Repo::new(REPO, REV, &[("w.bin", MIB)])]).await;
    srv.require_token(Some("hf_right"));
    let port = srv.url().rsplit(':').next().unwrap_or_default().to_string();
    // Another host name for the same server: the "CDN" of the redirect.
    srv.set_redirect(Some(&format!("http://localhost:{port}")));
    let vol = Volume::new();
    let req = |token: Option<&str>| FetchRequest {
        hf_token: token.map(str::to_string),
        ..vol.request(&srv, &source(REPO), "k")
    };

    let wrong = vol.run(&req(Some("hf_wrong")), &quick(5)).await;
    assert_eq!(wrong.code, EXIT_PERMANENT);
    let msg = wrong.outcome.message.unwrap_or_default();
    assert!(msg.contains("401"), "{msg}");
    assert!(!msg.contains("hf_wrong"), "{msg}");

    srv.reset_counts();
    let ran = vol.run(&req(Some("hf_right")), &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    for r in srv.requests() {
        let expected = (!r.path.starts_with("/cdn/")).then(|| "Bearer hf_right".to_string());
        assert_eq!(r.authorization, expected, "{}", r.path);
    }
    assert_eq!(srv.request_count(&format!("/cdn/{REPO}/{REV}/w.bin")), 1);
}

#[tokio::test]
async fn an_http_source_is_checked_against_its_digest() {
    let size = MIB + 3;
    let srv = WeightsServer::start_with_files(
        "127.0.0.1:0".parse().expect("addr"),
        Vec::new(),
        vec![("model.gguf".into(), size)],
    )
    .await
    .expect("the weights server starts");
    srv.require_token(Some("secret-bearer"));
    let sha = srv.file_sha256("model.gguf").expect("digest");
    let vol = Volume::new();
    let uri = format!("{}#sha256={sha}", srv.file_url("model.gguf"));
    let req = FetchRequest {
        bearer_token: Some("secret-bearer".into()),
        ..vol.request(&srv, &uri, "model-gguf")
    };

    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    assert_eq!(ran.outcome, Outcome::complete(size, 1, size));
    assert_eq!(ran.progress[0].total_bytes, size, "HEAD gave the size");
    assert!(srv.requests().iter().any(|r| r.method == "HEAD"));
    assert_eq!(sha256_file(&vol.path().join("model-gguf/model.gguf")), sha);

    let wrong = format!("{}#sha256={}", srv.file_url("model.gguf"), "0".repeat(64));
    let bad = vol
        .run(
            &FetchRequest {
                source: wrong,
                key: "other".into(),
                ..req.clone()
            },
            &quick(0),
        )
        .await;
    assert_eq!(bad.code, EXIT_FAILED);
    let msg = bad.outcome.message.unwrap_or_default();
    assert!(msg.contains("checksum mismatch for model.gguf"), "{msg}");
    assert!(msg.contains(&sha), "{msg}");
}

#[tokio::test]
async fn old_revisions_are_removed_except_the_kept_ones() {
    let srv = server(vec![Repo::new(REPO, REV, &[("w.bin", 1000)])]).await;
    let vol = Volume::new();
    for d in ["model-rev0", "model-serving", "model-rev1"] {
        std::fs::create_dir(vol.path().join(d)).expect("mkdir");
        std::fs::write(vol.path().join(d).join("w.bin.part"), [0u8; 100]).expect("write");
    }
    let req = FetchRequest {
        keep: vec!["model-serving".into()],
        ..vol.request(&srv, &source(REPO), "model-rev1")
    };
    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    assert!(!vol.path().join("model-rev0").exists());
    assert!(vol.path().join("model-serving/w.bin.part").exists());
    assert!(vol.path().join("model-rev1/w.bin").exists());
}

const BUCKET: &str = "models";
const S3_REGION: &str = "eu-central-1";
const AKID: &str = "AKIDFETCHTEST";
const SECRET: &str = "fetch/test+secret";

async fn s3_server(objects: &[(&str, u64)]) -> WeightsServer {
    let srv = WeightsServer::start_with_buckets(
        "127.0.0.1:0".parse().expect("addr"),
        vec![Bucket::new(BUCKET, objects)],
    )
    .await
    .expect("the weights server starts");
    srv.require_s3_key(Some(AKID));
    srv.verify_s3_signatures(Some(SECRET));
    srv
}

/// The path of an object as the client sends it (SigV4's encoding).
fn object_path(key: &str) -> String {
    let encoded: String = key
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("/{BUCKET}/{encoded}")
}

const S3_FILES: [(&str, u64); 4] = [
    ("config.json", 2_000),
    ("notes & more.txt", 100),
    ("weights/model-00001.safetensors", 3 * MIB),
    ("weights/model-00002.safetensors", 2 * MIB + 17),
];

#[tokio::test]
async fn an_s3_prefix_downloads_signed_and_paged_and_then_a_restart_downloads_nothing() {
    let mut objects: Vec<(String, u64)> = S3_FILES
        .iter()
        .map(|(p, s)| (format!("llama/v1/{p}"), *s))
        .collect();
    // A console's folder marker, a sibling prefix and an older revision:
    // none of them is part of the model.
    objects.push(("llama/v1/".into(), 0));
    objects.push(("llama/v10/other.bin".into(), 10));
    objects.push(("llama/v0/old.bin".into(), 10));
    let objects: Vec<(&str, u64)> = objects.iter().map(|(k, s)| (k.as_str(), *s)).collect();
    let srv = s3_server(&objects).await;
    srv.set_page_size(2);
    srv.set_rate_limit(8 * MIB);
    let vol = Volume::new();
    let uri = "s3://models/llama/v1";
    let req = vol.s3_request(&srv, uri, "v1", Some((AKID, SECRET)));
    let total: u64 = S3_FILES.iter().map(|(_, s)| s).sum();

    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    assert_eq!(ran.outcome, Outcome::complete(total, 4, total));
    let dir = vol.path().join("v1");
    for (path, size) in S3_FILES {
        let on_disk = std::fs::read(dir.join(path)).expect("downloaded");
        let expected = srv
            .object_content(BUCKET, &format!("llama/v1/{path}"), 0, size as usize)
            .expect("served");
        assert!(on_disk == expected, "{path} has the served bytes");
        assert!(!part(dir.join(path)).exists(), "no part left of {path}");
    }
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("the model's directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [MARKER, "config.json", "notes & more.txt", "weights"],
        "nothing from beside the prefix, no folder marker"
    );
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(MARKER)).expect("the marker"))
            .expect("JSON");
    assert_eq!(
        marker,
        serde_json::json!({"source": uri, "revision": "", "files": 4, "bytes": total})
    );

    // The listing: 5 keys under llama/v1/ (the marker too), 2 a page, each
    // page asked with the last one's token, encoded.
    let pages: Vec<_> = srv
        .requests()
        .into_iter()
        .filter(|r| r.path == format!("/{BUCKET}"))
        .collect();
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert_eq!(
        pages[0].query.as_deref(),
        Some("list-type=2&prefix=llama%2Fv1%2F")
    );
    assert_eq!(
        pages[1].query.as_deref(),
        Some("list-type=2&prefix=llama%2Fv1%2F&continuation-token=2%2Ftok%2B%3D")
    );
    // Every request signed by the key, for the region; the server checked
    // each signature against the secret as it received the request.
    let credential = format!("AWS4-HMAC-SHA256 Credential={AKID}/");
    let scope = format!("/{S3_REGION}/s3/aws4_request,");
    for r in srv.requests() {
        let auth = r.authorization.unwrap_or_default();
        assert!(auth.starts_with(&credential), "{}: {auth}", r.path);
        assert!(auth.contains(&scope), "{}: {auth}", r.path);
        assert!(
            auth.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date,"),
            "{}: {auth}",
            r.path
        );
    }
    assert_eq!(
        srv.request_count(&object_path("llama/v1/notes & more.txt")),
        1
    );
    assert_eq!(srv.request_count(&object_path("llama/v10/other.bin")), 0);

    let p = &ran.progress;
    assert!(p.len() >= 3, "{p:?}");
    progress_climbs_to_the_total(p, total, 4);

    // A restart: the marker answers, the store sees nothing.
    srv.reset_counts();
    let again = vol.run(&req, &quick(5)).await;
    assert_eq!(again.code, 0, "{:?}", again.outcome);
    assert_eq!(again.outcome, Outcome::complete(total, 4, 0));
    assert_eq!(srv.bytes_served(), 0);
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
}

#[tokio::test]
async fn an_s3_download_cut_short_resumes_with_a_signed_range() {
    let size = 4 * MIB;
    let key = "llama/v1/w.bin";
    let srv = s3_server(&[(key, size)]).await;
    let vol = Volume::new();
    let mut req = vol.s3_request(&srv, "s3://models/llama/v1", "k", Some((AKID, SECRET)));
    // Temporary credentials: the token is sent and signed.
    req.s3.session_token = Some("session/token+=".into());
    let cut = MIB + 5;
    srv.cut_next_response_after(cut);

    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    let (gets, from) = resumed_once(&srv, &object_path(key), cut);
    let auth = gets[1].authorization.clone().unwrap_or_default();
    assert!(
        auth.contains(
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-security-token,"
        ),
        "the range and the token are signed: {auth}"
    );
    assert_eq!(srv.bytes_served(), cut + (size - from));
    assert_eq!(ran.outcome.downloaded_bytes, Some(size));
    assert_eq!(
        Some(sha256_file(&vol.path().join("k/w.bin"))),
        srv.object_sha256(BUCKET, key)
    );
}

#[tokio::test]
async fn s3_without_the_right_key_exits_permanent_and_names_the_refusal() {
    let srv = s3_server(&[("llama/v1/w.bin", 1000)]).await;
    let vol = Volume::new();
    let uri = "s3://models/llama/v1";

    for (keys, reason) in [
        (None, "AccessDenied"),
        (Some(("AKIDOTHER", SECRET)), "AccessDenied"),
        (Some((AKID, "not-the-secret")), "SignatureDoesNotMatch"),
    ] {
        srv.reset_counts();
        let ran = vol
            .run(&vol.s3_request(&srv, uri, "k", keys), &quick(5))
            .await;
        assert_eq!(ran.code, EXIT_PERMANENT, "{keys:?}: {:?}", ran.outcome);
        assert_eq!(ran.outcome.result, OutcomeKind::Failed);
        let msg = ran.outcome.message.unwrap_or_default();
        assert!(msg.contains("s3://models/llama/v1/"), "{msg}");
        assert!(msg.contains("403 Forbidden"), "{msg}");
        assert!(msg.contains(reason), "{msg}");
        assert!(!msg.contains("not-the-secret"), "{msg}");
        assert_eq!(srv.requests().len(), 1, "a 403 is not retried");
        let sent = srv.requests()[0].authorization.clone();
        assert_eq!(sent.is_none(), keys.is_none(), "unsigned without keys");
        assert!(!vol.path().join("k/w.bin").exists());
    }

    // A public bucket: no key, no signature, no refusal.
    let srv = s3_server(&[("llama/v1/w.bin", 1000)]).await;
    srv.require_s3_key(None);
    srv.verify_s3_signatures(None);
    let ran = vol
        .run(&vol.s3_request(&srv, uri, "k", None), &quick(5))
        .await;
    assert_eq!(
        ran.code, 0,
        "a public bucket needs no key: {:?}",
        ran.outcome
    );
    assert!(srv.requests().iter().all(|r| r.authorization.is_none()));
}

#[tokio::test]
async fn an_s3_prefix_that_is_one_object_downloads_that_file() {
    let size = MIB + 3;
    let srv = s3_server(&[("llama/model.gguf", size), ("llama/model.gguf.md", 5)]).await;
    let vol = Volume::new();
    let uri = "s3://models/llama/model.gguf";
    let req = vol.s3_request(&srv, uri, "gguf", Some((AKID, SECRET)));

    let ran = vol.run(&req, &quick(5)).await;
    assert_eq!(ran.code, 0, "{:?}", ran.outcome);
    assert_eq!(ran.outcome, Outcome::complete(size, 1, size));
    assert_eq!(ran.progress[0].total_bytes, size, "HEAD gave the size");
    let methods: Vec<_> = srv
        .requests()
        .into_iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        methods,
        [
            format!("GET /{BUCKET}"),
            format!("HEAD /{BUCKET}/llama/model.gguf"),
            format!("GET /{BUCKET}/llama/model.gguf"),
        ]
    );
    assert_eq!(
        Some(sha256_file(&vol.path().join("gguf/model.gguf"))),
        srv.object_sha256(BUCKET, "llama/model.gguf")
    );
    let names: Vec<_> = std::fs::read_dir(vol.path().join("gguf"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != MARKER)
        .collect();
    assert_eq!(names, ["model.gguf"]);

    // Neither a prefix nor an object: a permanent 404.
    let missing = vol
        .run(
            &vol.s3_request(&srv, "s3://models/llama/none", "none", Some((AKID, SECRET))),
            &quick(5),
        )
        .await;
    assert_eq!(missing.code, EXIT_PERMANENT, "{:?}", missing.outcome);
    let msg = missing.outcome.message.unwrap_or_default();
    assert!(msg.contains("s3://models/llama/none"), "{msg}");
    assert!(msg.contains("404"), "{msg}");
}

#[test]
fn the_command_line_of_the_job() {
    let cli = Cli::try_parse_from([
        "modelservice-operator",
        "fetch",
        "--source",
        "hf://org/model@rev1",
        "--dest",
        "/cache",
        "--key",
        "model-rev1",
        "--capacity",
        "53687091200",
        "--keep",
        "a",
        "--keep",
        "b",
    ])
    .expect("parses");
    let Command::Fetch(args) = cli.command else {
        panic!("not fetch: {:?}", cli.command);
    };
    assert_eq!(args.source, "hf://org/model@rev1");
    assert_eq!(args.dest, PathBuf::from("/cache"));
    assert_eq!(args.key, "model-rev1");
    assert_eq!(args.capacity, 50 << 30);
    assert_eq!(args.keep, ["a", "b"]);
    assert_eq!(args.termination_log, PathBuf::from("/dev/termination-log"));
}

/// Progress: a line at the start, lines while it runs, never backwards,
/// the last at 100%.
fn progress_climbs_to_the_total(p: &[Progress], total: u64, files: u32) {
    assert_eq!(
        (p[0].done_bytes, p[0].total_bytes, p[0].total_files),
        (0, total, files)
    );
    let last = p[p.len() - 1];
    assert_eq!((last.done_bytes, last.files), (total, files));
    assert!(
        p.windows(2).all(|w| w[0].done_bytes <= w[1].done_bytes),
        "{p:?}"
    );
    assert!(p.iter().any(|l| l.done_bytes > 0 && l.done_bytes < total));
}

/// The two GETs of `path`: the first from the start, the second (after a
/// cut at `cut`) resuming from a byte in (0, cut]; and that byte.
fn resumed_once(
    srv: &WeightsServer,
    path: &str,
    cut: u64,
) -> (Vec<fake_apiserver::weights_server::Seen>, u64) {
    let gets: Vec<_> = srv
        .requests()
        .into_iter()
        .filter(|r| r.path == path)
        .collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0].range, None);
    let from: u64 = gets[1]
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
        .unwrap_or_else(|| panic!("a resume from a byte: {:?}", gets[1].range));
    assert!(from > 0 && from <= cut, "{from}");
    (gets, from)
}
