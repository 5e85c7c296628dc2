//! A fake Hugging Face hub (and plain file server, and S3 store) for the
//! `fetch` tests.
//!
//! Tests of a downloader need weights that are big enough to watch, a
//! server that misbehaves on cue (throttles, drops a connection, corrupts a
//! byte) and a record of what was asked. The files' bytes are generated
//! from `(repo, revision, path, offset)` on the fly, so hundreds of MB cost
//! no memory and a test can compute any expected byte itself.
//!
//! Endpoints, as the hub serves them:
//! - `GET /api/models/{org}/{name}/tree/{revision}?recursive=true`: the file
//!   tree (directories too); files not ending in `.json` carry `lfs.oid`
//!   (their SHA-256), as LFS files do. Paged with `Link: rel="next"` when
//!   [`WeightsServer::set_page_size`] is set.
//! - `GET|HEAD /{org}/{name}/resolve/{revision}/{path}`: the file, with
//!   `Range` (206 + `Content-Range`, 416 past the end); or a 302 to
//!   `/cdn/...` when [`WeightsServer::set_redirect`] is set.
//! - `GET|HEAD /files/{name}`: the plain files given to
//!   [`WeightsServer::start_with_files`], for http(s) sources.
//! - S3, path-style, for the buckets given to
//!   [`WeightsServer::start_with_buckets`] (the server's URL is the
//!   client's `AWS_ENDPOINT_URL`):
//!   `GET /{bucket}?list-type=2&prefix=…[&continuation-token=…]` is
//!   ListObjectsV2 (XML, keys in order, paged by
//!   [`WeightsServer::set_page_size`]); `GET|HEAD /{bucket}/{key}` is the
//!   object, with `Range` and an `ETag`. Keys are percent-decoded, as S3
//!   does. [`WeightsServer::require_s3_key`] and
//!   [`WeightsServer::verify_s3_signatures`] answer 403 with S3's XML error
//!   to requests not signed (SigV4) by the right key.
//!
//! Hub and plain-file paths are matched as sent (no percent-decoding): test
//! files use URL-safe names.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream;
use ring::{digest, hmac};

/// The bytes of one response chunk (smaller under a throughput limit).
const CHUNK: u64 = 64 * 1024;
/// No cut pending.
const NO_CUT: u64 = u64::MAX;

/// A model repository to serve.
#[derive(Clone, Debug)]
pub struct Repo {
    /// `org/model`.
    pub name: String,
    pub revision: String,
    /// `(path, size)` of each file.
    pub files: Vec<(String, u64)>,
}

impl Repo {
    pub fn new(name: &str, revision: &str, files: &[(&str, u64)]) -> Self {
        Self {
            name: name.into(),
            revision: revision.into(),
            files: files.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
        }
    }
}

/// A bucket to serve: `(key, size)` of each object, any order.
#[derive(Clone, Debug)]
pub struct Bucket {
    pub name: String,
    pub objects: Vec<(String, u64)>,
}

impl Bucket {
    pub fn new(name: &str, objects: &[(&str, u64)]) -> Self {
        Self {
            name: name.into(),
            objects: objects.iter().map(|(k, s)| (k.to_string(), *s)).collect(),
        }
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query, as sent.
    pub query: Option<String>,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

#[derive(Clone, Debug)]
struct File {
    seed: u64,
    size: u64,
    sha256: String,
}

#[derive(Default)]
struct Shared {
    url: String,
    /// `(repo, revision)` → files in order.
    repos: HashMap<(String, String), Vec<(String, File)>>,
    plain: HashMap<String, File>,
    /// Bucket → objects sorted by key, as S3 lists them.
    buckets: HashMap<String, Vec<(String, File)>>,
    s3_key: Mutex<Option<String>>,
    s3_secret: Mutex<Option<String>>,
    rate: AtomicU64,
    cut_next: AtomicU64,
    page_size: AtomicUsize,
    served: AtomicU64,
    corrupt: Mutex<Vec<(String, u64)>>,
    token: Mutex<Option<String>>,
    redirect: Mutex<Option<String>>,
    log: Mutex<Vec<Seen>>,
}

/// The running server; it stops when dropped.
pub struct WeightsServer {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WeightsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WeightsServer {
    /// Serves `repos` on `bind` (127.0.0.1:0 in tests, 0.0.0.0:0 for pods).
    pub async fn start(bind: SocketAddr, repos: Vec<Repo>) -> std::io::Result<Self> {
        Self::start_with_files(bind, repos, Vec::new()).await
    }

    /// Also serves `(name, size)` plain files at `/files/{name}`.
    pub async fn start_with_files(
        bind: SocketAddr,
        repos: Vec<Repo>,
        files: Vec<(String, u64)>,
    ) -> std::io::Result<Self> {
        Self::start_all(bind, repos, files, Vec::new()).await
    }

    /// Serves `buckets` as an S3-compatible store, path-style at the
    /// server's URL.
    pub async fn start_with_buckets(
        bind: SocketAddr,
        buckets: Vec<Bucket>,
    ) -> std::io::Result<Self> {
        Self::start_all(bind, Vec::new(), Vec::new(), buckets).await
    }

    async fn start_all(
        bind: SocketAddr,
        repos: Vec<Repo>,
        files: Vec<(String, u64)>,
        buckets: Vec<Bucket>,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            addr.ip().to_string()
        };
        let mut shared = Shared {
            url: format!("http://{host}:{}", addr.port()),
            cut_next: AtomicU64::new(NO_CUT),
            ..Shared::default()
        };
        for r in repos {
            let files = r
                .files
                .iter()
                .map(|(p, size)| (p.clone(), file(&[&r.name, &r.revision, p], *size)))
                .collect();
            shared.repos.insert((r.name, r.revision), files);
        }
        for (name, size) in files {
            let f = file(&["files", &name], size);
            shared.plain.insert(name, f);
        }
        for b in buckets {
            let mut objects: Vec<(String, File)> = b
                .objects
                .iter()
                .map(|(k, size)| (k.clone(), file(&["s3", &b.name, k], *size)))
                .collect();
            objects.sort_by(|a, b| a.0.cmp(&b.0));
            shared.buckets.insert(b.name, objects);
        }
        let shared = Arc::new(shared);
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { shared, task })
    }

    /// `http://127.0.0.1:PORT` (the loopback address when bound to all).
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// The URL of a plain file, for an http source.
    pub fn file_url(&self, name: &str) -> String {
        format!("{}/files/{name}", self.shared.url)
    }

    /// Limits every response to about this many bytes a second (0: none).
    pub fn set_rate_limit(&self, bytes_per_second: u64) {
        self.shared.rate.store(bytes_per_second, Ordering::SeqCst);
    }

    /// The next file response sends `n` body bytes, then drops the connection.
    pub fn cut_next_response_after(&self, n: u64) {
        self.shared.cut_next.store(n, Ordering::SeqCst);
    }

    /// Every response of `path` (a repo file's path or a plain file's name)
    /// has byte `offset` flipped; the listing keeps the true digest.
    pub fn corrupt(&self, path: &str, offset: u64) {
        lock(&self.shared.corrupt).push((path.into(), offset));
    }

    /// Stops corrupting.
    pub fn heal(&self) {
        lock(&self.shared.corrupt).clear();
    }

    /// Pages the tree API and the S3 listing: `n` entries a page (0: one
    /// page).
    pub fn set_page_size(&self, n: usize) {
        self.shared.page_size.store(n, Ordering::SeqCst);
    }

    /// Requires `Authorization: Bearer {token}` on the API, resolve and
    /// plain files (401 otherwise); the CDN path needs none.
    pub fn require_token(&self, token: Option<&str>) {
        *lock(&self.shared.token) = token.map(str::to_string);
    }

    /// Answers 403 (`AccessDenied`) to S3 requests whose Authorization does
    /// not name this access key (`Credential={key}/…`); None: anyone.
    pub fn require_s3_key(&self, access_key_id: Option<&str>) {
        *lock(&self.shared.s3_key) = access_key_id.map(str::to_string);
    }

    /// Checks every S3 request's SigV4 signature against this secret key,
    /// over the request as received, and answers 403
    /// (`SignatureDoesNotMatch`) to a wrong or missing one; None: no check.
    pub fn verify_s3_signatures(&self, secret_access_key: Option<&str>) {
        *lock(&self.shared.s3_secret) = secret_access_key.map(str::to_string);
    }

    /// Makes `resolve` answer 302 to `{base}/cdn/{repo}/{revision}/{path}`
    /// (`base` e.g. `http://localhost:PORT`, a different host for the
    /// client; empty for a host-relative Location). None serves directly.
    pub fn set_redirect(&self, base: Option<&str>) {
        *lock(&self.shared.redirect) = base.map(str::to_string);
    }

    /// File body bytes sent so far.
    pub fn bytes_served(&self) -> u64 {
        self.shared.served.load(Ordering::SeqCst)
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        lock(&self.shared.log).clone()
    }

    /// How many requests had this path.
    pub fn request_count(&self, path: &str) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|s| s.path == path)
            .count()
    }

    /// Clears the request log and the byte count.
    pub fn reset_counts(&self) {
        lock(&self.shared.log).clear();
        self.shared.served.store(0, Ordering::SeqCst);
    }

    /// The true SHA-256 (hex) of a repo file.
    pub fn sha256(&self, repo: &str, revision: &str, path: &str) -> Option<String> {
        self.repo_file(repo, revision, path)
            .map(|f| f.sha256.clone())
    }

    /// The true SHA-256 (hex) of an S3 object.
    pub fn object_sha256(&self, bucket: &str, key: &str) -> Option<String> {
        self.object(bucket, key).map(|f| f.sha256.clone())
    }

    /// The true bytes `offset..offset + len` of an S3 object.
    pub fn object_content(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        len: usize,
    ) -> Option<Vec<u8>> {
        let f = self.object(bucket, key)?;
        let mut buf = vec![0; len];
        fill(f.seed, offset, &mut buf);
        Some(buf)
    }

    fn object(&self, bucket: &str, key: &str) -> Option<&File> {
        self.shared
            .buckets
            .get(bucket)?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, f)| f)
    }

    /// The true SHA-256 (hex) of a plain file.
    pub fn file_sha256(&self, name: &str) -> Option<String> {
        self.shared.plain.get(name).map(|f| f.sha256.clone())
    }

    /// The true bytes `offset..offset + len` of a repo file.
    pub fn content(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
        offset: u64,
        len: usize,
    ) -> Option<Vec<u8>> {
        let f = self.repo_file(repo, revision, path)?;
        let mut buf = vec![0; len];
        fill(f.seed, offset, &mut buf);
        Some(buf)
    }

    fn repo_file(&self, repo: &str, revision: &str, path: &str) -> Option<&File> {
        self.shared
            .repos
            .get(&(repo.to_string(), revision.to_string()))?
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, f)| f)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A file's seed, size and digest; the digest streams the generator once.
fn file(names: &[&str], size: u64) -> File {
    let mut seed = 0xcbf2_9ce4_8422_2325u64;
    for b in names.join("\0").bytes() {
        seed = (seed ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut ctx = digest::Context::new(&digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    while pos < size {
        let n = (size - pos).min(buf.len() as u64) as usize;
        fill(seed, pos, &mut buf[..n]);
        ctx.update(&buf[..n]);
        pos += n as u64;
    }
    let sha256 = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    File { seed, size, sha256 }
}

/// The generated bytes at `offset..offset + buf.len()`: splitmix64 of each
/// 8-byte block's index.
fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = offset;
    let mut i = 0;
    while i < buf.len() {
        let mut z = (seed ^ (pos / 8)).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let word = (z ^ (z >> 31)).to_le_bytes();
        let within = (pos % 8) as usize;
        let n = (8 - within).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[within..within + n]);
        i += n;
        pos += n as u64;
    }
}

async fn handle(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = req.headers().clone();
    let text = |h: header::HeaderName| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    lock(&s.log).push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: req.uri().query().map(str::to_string),
        range: text(header::RANGE),
        authorization: text(header::AUTHORIZATION),
    });
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let authorized = || match lock(&s.token).as_deref() {
        None => true,
        Some(t) => text(header::AUTHORIZATION).as_deref() == Some(&format!("Bearer {t}")),
    };
    match parts.as_slice() {
        [bucket, rest @ ..] if s.buckets.contains_key(*bucket) => s3(
            &s,
            &method,
            &path,
            &query,
            &headers,
            bucket,
            &rest.join("/"),
        ),
        ["cdn", org, name, rev, rest @ ..] => {
            serve_repo_file(&s, &method, &headers, org, name, rev, &rest.join("/"))
        }
        _ if !authorized() => StatusCode::UNAUTHORIZED.into_response(),
        ["api", "models", org, name, "tree", rev] => tree(&s, org, name, rev, &query),
        [org, name, "resolve", rev, rest @ ..] => {
            let file = rest.join("/");
            match lock(&s.redirect).clone() {
                Some(base) => (
                    StatusCode::FOUND,
                    [(
                        header::LOCATION,
                        format!("{base}/cdn/{org}/{name}/{rev}/{file}"),
                    )],
                )
                    .into_response(),
                None => serve_repo_file(&s, &method, &headers, org, name, rev, &file),
            }
        }
        ["files", name] => match s.plain.get(*name) {
            Some(f) => serve(&s, &method, &headers, name, f),
            None => StatusCode::NOT_FOUND.into_response(),
        },
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn serve_repo_file(
    s: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    org: &str,
    name: &str,
    rev: &str,
    path: &str,
) -> Response {
    let file = s
        .repos
        .get(&(format!("{org}/{name}"), rev.to_string()))
        .and_then(|files| files.iter().find(|(p, _)| p == path));
    match file {
        Some((p, f)) => serve(s, method, headers, p, f),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The tree API: every directory once, then files with their digests.
fn tree(s: &Shared, org: &str, name: &str, rev: &str, query: &str) -> Response {
    let Some(files) = s.repos.get(&(format!("{org}/{name}"), rev.to_string())) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":"Repository not found"}"#,
        )
            .into_response();
    };
    let mut entries = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for (path, _) in files {
        // Every parent of the file: "a", "a/b" for "a/b/c.bin".
        let parents = path.match_indices('/').map(|(i, _)| &path[..i]);
        for dir in parents {
            if dirs.insert(dir.to_string()) {
                entries.push(serde_json::json!({"type": "directory", "path": dir, "size": 0}));
            }
        }
    }
    for (path, f) in files {
        let mut e = serde_json::json!({"type": "file", "path": path, "size": f.size});
        if !path.ends_with(".json") {
            e["lfs"] = serde_json::json!({"oid": f.sha256, "size": f.size, "pointerSize": 134});
        }
        entries.push(e);
    }
    let page = s.page_size.load(Ordering::SeqCst);
    let cursor: usize = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("cursor="))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let end = if page == 0 {
        entries.len()
    } else {
        (cursor + page).min(entries.len())
    };
    let body = serde_json::to_string(&entries[cursor.min(end)..end]).unwrap_or_default();
    let mut resp = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    if end < entries.len() {
        let link = format!(
            "<{}/api/models/{org}/{name}/tree/{rev}?recursive=true&cursor={end}>; rel=\"next\"",
            s.url
        );
        if let Ok(v) = HeaderValue::from_str(&link) {
            resp.headers_mut().insert(header::LINK, v);
        }
    }
    resp
}

/// An S3 request of `bucket`: the listing (no key) or an object.
fn s3(
    s: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    bucket: &str,
    raw_key: &str,
) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(key) = lock(&s.s3_key).as_deref()
        && !authorization.contains(&format!("Credential={key}/"))
    {
        return s3_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied");
    }
    if let Some(secret) = lock(&s.s3_secret).as_deref()
        && !sigv4_matches(secret, method, path, query, headers)
    {
        return s3_error(
            StatusCode::FORBIDDEN,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        );
    }
    let Some(objects) = s.buckets.get(bucket) else {
        return s3_error(StatusCode::NOT_FOUND, "NoSuchBucket", "");
    };
    if raw_key.is_empty() {
        return s3_list(s, bucket, objects, query);
    }
    let key = percent_decode(raw_key);
    match objects.iter().find(|(k, _)| *k == key) {
        Some((k, f)) => {
            let mut resp = serve(s, method, headers, k, f);
            if let Ok(v) = HeaderValue::from_str(&etag(f)) {
                resp.headers_mut().insert(header::ETAG, v);
            }
            resp
        }
        None if method == Method::HEAD => StatusCode::NOT_FOUND.into_response(),
        None => s3_error(
            StatusCode::NOT_FOUND,
            "NoSuchKey",
            "The specified key does not exist.",
        ),
    }
}

/// ListObjectsV2: the keys under `prefix`, in order, a page at a time.
/// The continuation token holds a '/', a '+' and a '=' (as S3's base64
/// tokens do), so a client that does not encode it loses its place.
fn s3_list(s: &Shared, bucket: &str, objects: &[(String, File)], query: &str) -> Response {
    let params: HashMap<String, String> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    if params.get("list-type").map(String::as_str) != Some("2") {
        return s3_error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "list-type=2 only",
        );
    }
    let prefix = params.get("prefix").cloned().unwrap_or_default();
    let matching: Vec<&(String, File)> = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .collect();
    let start = match params.get("continuation-token") {
        None => 0,
        Some(t) => match t
            .strip_suffix("/tok+=")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) if n <= matching.len() => n,
            _ => {
                return s3_error(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "The continuation token provided is incorrect",
                );
            }
        },
    };
    let page = s.page_size.load(Ordering::SeqCst);
    let end = if page == 0 {
        matching.len()
    } else {
        (start + page).min(matching.len())
    };
    let truncated = end < matching.len();
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        xml_escape(bucket),
        xml_escape(&prefix),
        end - start
    );
    if let Some(t) = params.get("continuation-token") {
        xml.push_str(&format!(
            "<ContinuationToken>{}</ContinuationToken>",
            xml_escape(t)
        ));
    }
    if truncated {
        xml.push_str(&format!(
            "<NextContinuationToken>{}</NextContinuationToken>",
            xml_escape(&format!("{end}/tok+="))
        ));
    }
    for (key, f) in &matching[start..end] {
        xml.push_str(&format!(
            "<Contents><Key>{}</Key><LastModified>2024-07-23T10:00:00.000Z</LastModified><ETag>{}</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            xml_escape(key),
            xml_escape(&etag(f)),
            f.size
        ));
    }
    xml.push_str("</ListBucketResult>");
    ([(header::CONTENT_TYPE, "application/xml")], xml).into_response()
}

/// S3's error answer: a status and an XML body with its code.
fn s3_error(status: StatusCode, code: &str, message: &str) -> Response {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message></Error>",
        xml_escape(message)
    );
    (status, [(header::CONTENT_TYPE, "application/xml")], xml).into_response()
}

/// A quoted hex string, as S3's ETags are (here a slice of the SHA-256,
/// not an MD5: nothing may rely on what an ETag hashes).
fn etag(f: &File) -> String {
    format!("\"{}\"", &f.sha256[..32])
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |j: usize| bytes.get(j).and_then(|b| char::from(*b).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// SigV4's encoding: every byte but the unreserved ones ('/' too unless
/// `keep_slash`), uppercase hex.
fn sigv4_encode(s: &str, keep_slash: bool) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric()
                || matches!(b, b'-' | b'.' | b'_' | b'~')
                || (keep_slash && b == b'/')
            {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Whether the request carries a valid AWS SigV4 signature by `secret`,
/// computed as S3 does: from the request as received (its path decoded
/// and encoded again, its query sorted, the headers it says it signed).
/// Written apart from the operator's signer, so that a mistake in one is
/// not hidden by the same mistake in the other.
fn sigv4_matches(
    secret: &str,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(auth) = text("authorization").and_then(|a| a.strip_prefix("AWS4-HMAC-SHA256 ")) else {
        return false;
    };
    let field = |name: &str| {
        auth.split(',')
            .find_map(|p| p.trim().strip_prefix(name)?.strip_prefix('='))
    };
    let (Some(credential), Some(signed_headers), Some(signature)) = (
        field("Credential"),
        field("SignedHeaders"),
        field("Signature"),
    ) else {
        return false;
    };
    let Some((_, scope)) = credential.split_once('/') else {
        return false;
    };
    let scope_parts: Vec<&str> = scope.split('/').collect();
    let [date, region, service, "aws4_request"] = scope_parts.as_slice() else {
        return false;
    };
    let (Some(amz_date), Some(payload)) = (text("x-amz-date"), text("x-amz-content-sha256")) else {
        return false;
    };
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                sigv4_encode(&percent_decode(k), false),
                sigv4_encode(&percent_decode(v), false),
            )
        })
        .collect();
    pairs.sort();
    let canonical_query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in signed_headers.split(';') {
        let Some(value) = text(name) else {
            return false;
        };
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let canonical_request = format!(
        "{method}\n{}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{payload}",
        sigv4_encode(&percent_decode(path), true)
    );
    let hash = digest::digest(&digest::SHA256, canonical_request.as_bytes());
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(hash.as_ref())
    );
    let mut key = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, format!("AWS4{secret}").as_bytes()),
        date.as_bytes(),
    );
    for part in [*region, *service, "aws4_request", string_to_sign.as_str()] {
        key = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, key.as_ref()),
            part.as_bytes(),
        );
    }
    hex(key.as_ref()) == signature
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A file's bytes, whole or from a `Range: bytes=N-[M]`.
fn serve(s: &Arc<Shared>, method: &Method, headers: &HeaderMap, path: &str, f: &File) -> Response {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| {
            let start: u64 = a.parse().ok()?;
            let end = if b.is_empty() {
                f.size
            } else {
                b.parse::<u64>().ok()? + 1
            };
            Some((start, end.min(f.size)))
        });
    let (status, start, end) = match range {
        Some((start, _)) if start >= f.size => {
            return (
                StatusCode::RANGE_NOT_SATISFIABLE,
                [(header::CONTENT_RANGE, format!("bytes */{}", f.size))],
            )
                .into_response();
        }
        Some((start, end)) => (StatusCode::PARTIAL_CONTENT, start, end),
        None => (StatusCode::OK, 0, f.size),
    };
    let mut builder = Response::builder()
        .status(status)
        .header(header::CONTENT_LENGTH, end - start)
        .header(header::ACCEPT_RANGES, "bytes");
    if status == StatusCode::PARTIAL_CONTENT {
        builder = builder.header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{}", end - 1, f.size),
        );
    }
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        body(s.clone(), path, f.seed, start, end)
    };
    builder
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Streams `start..end` in chunks, honouring the knobs: the rate limit, a
/// pending cut (taken by this response) and corrupted bytes.
fn body(s: Arc<Shared>, path: &str, seed: u64, start: u64, end: u64) -> Body {
    let cut = match s.cut_next.swap(NO_CUT, Ordering::SeqCst) {
        NO_CUT => None,
        n => Some(n),
    };
    let corrupt: Vec<u64> = lock(&s.corrupt)
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, k)| *k)
        .collect();
    let chunks = stream::unfold(start, move |pos| {
        let s = s.clone();
        let corrupt = corrupt.clone();
        async move {
            if pos >= end {
                return None;
            }
            let sent = pos - start;
            if cut.is_some_and(|c| sent >= c) {
                return Some((Err(std::io::Error::other("cut by the test")), end));
            }
            let mut n = (end - pos).min(CHUNK);
            if let Some(c) = cut {
                n = n.min(c - sent);
            }
            let rate = s.rate.load(Ordering::SeqCst);
            if rate > 0 {
                n = n.min((rate / 20).max(1));
                tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
            }
            let mut buf = vec![0u8; n as usize];
            fill(seed, pos, &mut buf);
            for k in &corrupt {
                if (pos..pos + n).contains(k) {
                    buf[(k - pos) as usize] ^= 0xff;
                }
            }
            s.served.fetch_add(n, Ordering::SeqCst);
            Some((Ok::<_, std::io::Error>(Bytes::from(buf)), pos + n))
        }
    });
    Body::from_stream(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_the_same_whatever_the_offsets() {
        let mut whole = vec![0u8; 100];
        fill(7, 0, &mut whole);
        for start in [0usize, 1, 7, 8, 13] {
            let mut part = vec![0u8; 100 - start];
            fill(7, start as u64, &mut part);
            assert_eq!(part, whole[start..]);
        }
        let mut other = vec![0u8; 100];
        fill(8, 0, &mut other);
        assert_ne!(other, whole);
    }

    /// The verifier against "Example: GET Object" of AWS's SigV4
    /// documentation for S3: it accepts the published signature and
    /// nothing else.
    #[test]
    fn the_signature_check_accepts_aws_s3_get_object_example() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let mut h = HeaderMap::new();
        let mut set = |n: &'static str, v: &str| {
            h.insert(n, HeaderValue::from_str(v).expect("header"));
        };
        set("host", "examplebucket.s3.amazonaws.com");
        set("range", "bytes=0-9");
        set(
            "x-amz-content-sha256",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        );
        set("x-amz-date", "20130524T000000Z");
        set(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        );
        assert!(sigv4_matches(secret, &Method::GET, "/test.txt", "", &h));
        assert!(!sigv4_matches("other", &Method::GET, "/test.txt", "", &h));
        assert!(!sigv4_matches(secret, &Method::GET, "/test2.txt", "", &h));
        assert!(!sigv4_matches(secret, &Method::HEAD, "/test.txt", "", &h));
        assert!(!sigv4_matches(secret, &Method::GET, "/test.txt", "a=b", &h));
        h.insert("range", HeaderValue::from_static("bytes=0-10"));
        assert!(!sigv4_matches(secret, &Method::GET, "/test.txt", "", &h));
    }

    #[test]
    fn digests_are_of_the_generated_bytes() {
        let f = file(&["o/m", "r", "a"], 3000);
        let mut buf = vec![0u8; 3000];
        fill(f.seed, 0, &mut buf);
        let d = digest::digest(&digest::SHA256, &buf);
        let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(f.sha256, hex);
    }
}
