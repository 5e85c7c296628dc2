//! `s3://bucket/prefix` sources: Amazon S3 or an S3-compatible store
//! (MinIO, Ceph, R2…), listed with ListObjectsV2 and downloaded object by
//! object through the same resume machinery as the other sources.
//!
//! Requests are signed with AWS Signature Version 4 when keys are given
//! (from the user's Secret, as environment variables) and sent unsigned
//! otherwise, for a public bucket. The signature is computed here by hand
//! (ring's HMAC and SHA-256) rather than with an SDK: S3 needs only its
//! GET and HEAD, and the signing is a pure function tested against AWS's
//! published examples.
//!
//! S3 has no digest a download can check (an ETag is an MD5, or a hash of
//! part hashes for a multipart upload, and either way not of the whole file
//! with a known algorithm), so objects are verified by their listed size.

use std::time::SystemTime;

use http::{Method, StatusCode, Uri};
use ring::{digest, hmac};

use super::client::{self, Client};
use super::listing::{self, RemoteFile};
use super::outcome::Failure;

/// The region when none is configured: S3's own default.
const DEFAULT_REGION: &str = "us-east-1";

/// The SHA-256 of an empty body: every request here is a GET or a HEAD.
/// (`UNSIGNED-PAYLOAD` would do too; this value works with every store.)
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Where S3 is and who to be there: read from the environment of the Job,
/// which takes it from the user's Secret through `envFrom`.
#[derive(Clone, Default)]
pub struct S3Config {
    /// `AWS_ACCESS_KEY_ID`; with the secret key, requests are signed.
    pub access_key_id: Option<String>,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `AWS_SESSION_TOKEN`, for temporary credentials (sent as
    /// `x-amz-security-token`, and signed).
    pub session_token: Option<String>,
    /// `AWS_REGION`, else `AWS_DEFAULT_REGION`; None means `us-east-1`.
    pub region: Option<String>,
    /// `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`: an S3-compatible
    /// store, addressed path-style (`{endpoint}/{bucket}/{key}`).
    pub endpoint: Option<String>,
}

// By hand, so that a logged request never shows the secret key or the
// session token. The access key ID is no secret (it names the key, as in
// every signed request's Authorization header) and helps tell keys apart.
impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |v: &Option<String>| v.as_ref().map(|_| "<set>");
        f.debug_struct("S3Config")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &set(&self.secret_access_key))
            .field("session_token", &set(&self.session_token))
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl S3Config {
    /// The configuration in this process's environment.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The configuration `get` gives, by variable name; empty values count
    /// as unset (an optional key of a Secret is often present but empty).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        Self {
            access_key_id: var("AWS_ACCESS_KEY_ID"),
            secret_access_key: var("AWS_SECRET_ACCESS_KEY"),
            session_token: var("AWS_SESSION_TOKEN"),
            region: var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")),
            // The service-specific variable wins, as in the AWS SDKs.
            endpoint: var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")),
        }
    }

    fn region(&self) -> &str {
        self.region.as_deref().map_or(DEFAULT_REGION, str::trim)
    }

    /// The signer for these keys, or None for unsigned requests. One key
    /// without the other is a broken Secret, refused rather than sent
    /// unsigned to fail with a puzzling 403.
    pub(crate) fn signer(&self) -> Result<Option<Signer>, Failure> {
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => Ok(Some(Signer {
                credentials: Credentials {
                    access_key_id: id.trim().to_string(),
                    secret_access_key: secret.trim().to_string(),
                    session_token: self.session_token.as_ref().map(|t| t.trim().to_string()),
                },
                region: self.region().to_string(),
            })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(Failure::Permanent(
                "AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY".into(),
            )),
            (None, Some(_)) => Err(Failure::Permanent(
                "AWS_SECRET_ACCESS_KEY is set without AWS_ACCESS_KEY_ID".into(),
            )),
        }
    }

    /// How `bucket` is addressed: path-style on a configured endpoint,
    /// virtual-hosted on AWS.
    fn bucket(&self, bucket: &str) -> Result<Bucket, Failure> {
        if let Some(endpoint) = &self.endpoint {
            let endpoint = endpoint.trim().trim_end_matches('/');
            let ok = endpoint.starts_with("http://") || endpoint.starts_with("https://");
            if !ok || endpoint.parse::<Uri>().is_err() || endpoint.contains(['?', '#']) {
                return Err(Failure::Permanent(format!(
                    "the S3 endpoint {endpoint:?} (AWS_ENDPOINT_URL) must be an http:// or https:// URL"
                )));
            }
            return Ok(Bucket {
                root: format!("{endpoint}/{bucket}"),
                virtual_host: false,
            });
        }
        let region = self.region();
        // The region becomes part of a host name: nothing but a name.
        let region_ok = !region.is_empty()
            && region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !region_ok {
            return Err(Failure::Permanent(format!(
                "the AWS region {region:?} (AWS_REGION) is not a region name like eu-west-1"
            )));
        }
        // A bucket name with dots would break the TLS wildcard certificate
        // of `*.s3.{region}.amazonaws.com`: AWS serves it path-style.
        Ok(if bucket.contains('.') {
            Bucket {
                root: format!("https://s3.{region}.amazonaws.com/{bucket}"),
                virtual_host: false,
            }
        } else {
            Bucket {
                root: format!("https://{bucket}.s3.{region}.amazonaws.com"),
                virtual_host: true,
            }
        })
    }
}

/// Where one bucket's objects and listing are.
struct Bucket {
    /// Objects are at `{root}/{key}`.
    root: String,
    /// The listing is at `{root}/?…` (virtual-hosted) or `{root}?…`.
    virtual_host: bool,
}

impl Bucket {
    fn object_url(&self, key: &str) -> String {
        format!("{}/{}", self.root, encode(key, true))
    }

    fn list_url(&self, prefix: &str, continuation: Option<&str>) -> String {
        let slash = if self.virtual_host { "/" } else { "" };
        let mut url = format!(
            "{}{slash}?list-type=2&prefix={}",
            self.root,
            encode(prefix, false)
        );
        if let Some(token) = continuation {
            url.push_str("&continuation-token=");
            url.push_str(&encode(token, false));
        }
        url
    }
}

/// The files under `s3://{bucket}/{prefix}/`, or, when there are none, the
/// one object named `prefix`.
pub(crate) async fn list(
    client: &Client,
    config: &S3Config,
    bucket: &str,
    prefix: &str,
) -> Result<Vec<RemoteFile>, Failure> {
    let b = config.bucket(bucket)?;
    let dir = format!("{prefix}/");
    let label = format!("the listing of s3://{bucket}/{dir}");
    let mut files = Vec::new();
    let mut continuation: Option<String> = None;
    loop {
        let url = b.list_url(&dir, continuation.as_deref());
        let (status, _, body) = client.get_document(&url).await?;
        if !status.is_success() {
            return Err(refused(&label, status, &body));
        }
        let xml = std::str::from_utf8(&body)
            .map_err(|_| Failure::Permanent(format!("{label} is not UTF-8 text")))?;
        let page = parse_page(xml).map_err(|e| Failure::Permanent(format!("{label}: {e}")))?;
        for object in page.objects {
            let Some(path) = object.key.strip_prefix(&dir) else {
                return Err(Failure::Permanent(format!(
                    "{label} holds {:?}, outside the prefix",
                    object.key
                )));
            };
            // A "folder" made by a console: a zero-byte key ending in '/'.
            if path.is_empty() || path.ends_with('/') {
                continue;
            }
            listing::check_path(path).map_err(Failure::Permanent)?;
            tracing::debug!(
                "s3://{bucket}/{}: {} bytes, ETag {}",
                object.key,
                object.size,
                object.etag.as_deref().unwrap_or("-")
            );
            files.push(RemoteFile {
                path: path.to_string(),
                url: b.object_url(&object.key),
                size: Some(object.size),
                sha256: None,
            });
        }
        if !page.truncated {
            break;
        }
        match page.next {
            // The same token again would list the same page forever.
            Some(next) if continuation.as_deref() != Some(next.as_str()) => {
                continuation = Some(next);
            }
            _ => {
                return Err(Failure::Permanent(format!(
                    "{label} is truncated without a new NextContinuationToken"
                )));
            }
        }
    }
    if files.is_empty() {
        files.push(one_object(client, &b, bucket, prefix).await?);
    }
    listing::check_distinct(&files).map_err(Failure::Permanent)?;
    Ok(files)
}

/// The prefix as one object (`s3://models/llama/model.gguf`): a file named
/// after the key's last segment, sized by a HEAD.
async fn one_object(
    client: &Client,
    b: &Bucket,
    bucket: &str,
    key: &str,
) -> Result<RemoteFile, Failure> {
    let name = key.rsplit('/').next().unwrap_or(key);
    listing::check_path(name).map_err(Failure::Permanent)?;
    let url = b.object_url(key);
    let head = client.send(Method::HEAD, &url, None).await?;
    let status = head.status();
    if status == StatusCode::NOT_FOUND {
        return Err(Failure::Permanent(format!(
            "s3://{bucket}/{key}: no object under {key}/ nor at {key} ({status})"
        )));
    }
    if !status.is_success() {
        return Err(refused(&format!("s3://{bucket}/{key}"), status, &[]));
    }
    if let Some(etag) = head
        .headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
    {
        tracing::debug!("s3://{bucket}/{key}: ETag {etag}");
    }
    Ok(RemoteFile {
        path: name.to_string(),
        url,
        // A store that omits it still sends the body; the GET tells.
        size: listing::content_length(head.headers()),
        sha256: None,
    })
}

/// A failed S3 request, retryable (5xx, 429) or not, with S3's own reason
/// from an XML error body when there is one (`AccessDenied`,
/// `NoSuchBucket`, `RequestTimeTooSkewed`…).
fn refused(what: &str, status: StatusCode, body: &[u8]) -> Failure {
    let reason = std::str::from_utf8(body).ok().and_then(|xml| {
        let code = unescape(element(xml, "Code")?).ok()?;
        let message = element(xml, "Message").and_then(|m| unescape(m).ok());
        Some(match message {
            Some(m) if !m.is_empty() => format!(" ({code}: {m})"),
            _ => format!(" ({code})"),
        })
    });
    let msg = format!("{what} answered {status}{}", reason.unwrap_or_default());
    match client::check_status(what, status) {
        Err(Failure::Retryable(_)) => Failure::Retryable(msg),
        _ => Failure::Permanent(msg),
    }
}

/// One page of a ListObjectsV2 answer.
#[derive(Debug, PartialEq, Eq)]
struct Page {
    objects: Vec<Object>,
    truncated: bool,
    next: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
struct Object {
    key: String,
    size: u64,
    /// Without its quotes.
    etag: Option<String>,
}

/// Reads a `ListBucketResult` with a scanner, not an XML parser: S3's
/// answer is flat, machine-written and escapes every text, so the elements
/// needed (`Contents` with `Key`, `Size`, `ETag`; `IsTruncated`,
/// `NextContinuationToken`) are found by their tags.
fn parse_page(xml: &str) -> Result<Page, String> {
    if !xml.contains("<ListBucketResult") {
        return Err("the answer is not an S3 ListBucketResult".into());
    }
    let mut objects = Vec::new();
    let mut rest = xml;
    while let Some(block) = element(rest, "Contents") {
        // `element` borrows from `rest`: move past this block's end.
        let end = block.as_ptr() as usize - rest.as_ptr() as usize + block.len();
        rest = &rest[end..];
        let key = element(block, "Key").ok_or("a <Contents> without a <Key>")?;
        let key = unescape(key)?;
        let size = element(block, "Size")
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("{key:?} has no valid <Size>"))?;
        let etag = element(block, "ETag")
            .map(unescape)
            .transpose()?
            .map(|e| e.trim_matches('"').to_string());
        objects.push(Object { key, size, etag });
    }
    let truncated = match element(xml, "IsTruncated").map(str::trim) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(format!("<IsTruncated> is {other:?}")),
    };
    let next = element(xml, "NextContinuationToken")
        .map(unescape)
        .transpose()?;
    Ok(Page {
        objects,
        truncated,
        next,
    })
}

/// The text of the first `<name>…</name>` in `xml`.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(&xml[start..start + len])
}

/// Undoes XML's escapes: the five entities and numeric references (S3
/// writes control characters of a key as `&#x0D;`).
fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        let semi = tail
            .find(';')
            .ok_or_else(|| format!("an unterminated '&' in {text:?}"))?;
        let entity = &tail[..semi];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .map(|hex| u32::from_str_radix(hex, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse))
                .and_then(Result::ok)
                .and_then(char::from_u32)
                .ok_or_else(|| format!("an unknown entity &{entity}; in {text:?}"))?,
        };
        out.push(c);
        rest = &tail[semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// An access key, as given.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

/// Signs each request the client sends to the store.
#[derive(Clone)]
pub(crate) struct Signer {
    credentials: Credentials,
    region: String,
}

impl Signer {
    /// The headers that sign a `method` request of `url` (with `range`
    /// when it has one) at `now`, Authorization included; the client adds
    /// them as they are, `host` too, so what is sent is what was signed.
    pub fn headers(
        &self,
        method: &Method,
        url: &Uri,
        range: Option<&str>,
        now: SystemTime,
    ) -> Vec<(&'static str, String)> {
        let extra: Vec<(&str, &str)> = range.map(|r| ("range", r)).into_iter().collect();
        sign(
            method.as_str(),
            url,
            &extra,
            &amz_date(now),
            EMPTY_SHA256,
            &self.credentials,
            &self.region,
        )
    }
}

/// AWS Signature Version 4 for service `s3`, as a pure function: the
/// headers to add to a request of `method` to `url` that also carries
/// `headers` (all of them signed), at `amz_date` (`YYYYMMDDTHHMMSSZ`), for
/// a body whose SHA-256 is `payload_sha256`. Returns `host`,
/// `x-amz-date`, `x-amz-content-sha256`, `x-amz-security-token` (with a
/// session token) and `authorization`.
pub(crate) fn sign(
    method: &str,
    url: &Uri,
    headers: &[(&str, &str)],
    amz_date: &str,
    payload_sha256: &str,
    credentials: &Credentials,
    region: &str,
) -> Vec<(&'static str, String)> {
    let mut added: Vec<(&'static str, String)> = vec![
        ("host", host(url)),
        ("x-amz-date", amz_date.to_string()),
        ("x-amz-content-sha256", payload_sha256.to_string()),
    ];
    if let Some(token) = &credentials.session_token {
        added.push(("x-amz-security-token", token.clone()));
    }
    let mut signed: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), canonical_value(v)))
        .chain(
            added
                .iter()
                .map(|(n, v)| (n.to_string(), canonical_value(v))),
        )
        .collect();
    signed.sort();
    let names: Vec<&str> = signed.iter().map(|(n, _)| n.as_str()).collect();
    let names = names.join(";");
    let canonical_headers: String = signed.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let canonical_request = format!(
        "{method}\n{}\n{}\n{canonical_headers}\n{names}\n{payload_sha256}",
        canonical_uri(url.path()),
        canonical_query(url.query().unwrap_or(""))
    );
    let date = amz_date.get(..8).unwrap_or(amz_date);
    let scope = format!("{date}/{region}/s3/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref())
    );
    let mac = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
    };
    let secret = format!("AWS4{}", credentials.secret_access_key);
    let k_date = mac(secret.as_bytes(), date);
    let k_region = mac(k_date.as_ref(), region);
    let k_service = mac(k_region.as_ref(), "s3");
    let k_signing = mac(k_service.as_ref(), "aws4_request");
    let signature = hex(mac(k_signing.as_ref(), &string_to_sign).as_ref());
    added.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope},SignedHeaders={names},Signature={signature}",
            credentials.access_key_id
        ),
    ));
    added
}

/// The Host header for `url`: the host, and the port unless it is the
/// scheme's default (what hyper would send by itself).
fn host(url: &Uri) -> String {
    let host = url.host().unwrap_or_default();
    let default = match url.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    };
    match url.port_u16() {
        Some(port) if Some(port) != default => format!("{host}:{port}"),
        _ => host.to_string(),
    }
}

/// A header value as signed: trimmed, inner runs of spaces as one.
fn canonical_value(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The path, each byte outside RFC 3986's unreserved set percent-encoded
/// once ('/' kept): decoded first, so a path already encoded is not
/// encoded twice. S3 does not normalize `.` or `//` segments.
fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".into();
    }
    encode(&decode(path), true)
}

/// The query's pairs, each name and value encoded ('/' too), sorted; a
/// name without '=' has an empty value (`lifecycle=`).
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(&decode(k), false), encode(&decode(v), false))
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes every byte but RFC 3986's unreserved ones (and '/' when
/// `keep_slash`), in uppercase hex, as SigV4 requires.
fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Undoes percent-encoding; a '%' not followed by two hex digits is kept
/// as it is. Bytes that do not form UTF-8 are replaced (they were never
/// produced here).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex_at = |j: usize| bytes.get(j).and_then(|b| char::from(*b).to_digit(16));
        match (bytes[i], hex_at(i + 1), hex_at(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
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

/// `now` as SigV4's `YYYYMMDDTHHMMSSZ`, in UTC. A clock before 1970 or
/// beyond the year 9999 is signed as 1970: S3 then says the request's time
/// is too skewed, which names the real trouble.
pub(crate) fn amz_date(now: SystemTime) -> String {
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The key of AWS's published examples.
    fn example_key() -> Credentials {
        Credentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }

    fn uri(s: &str) -> Uri {
        s.parse().expect("uri")
    }

    fn authorization<'a>(added: &'a [(&'static str, String)]) -> &'a str {
        added
            .iter()
            .find(|(n, _)| *n == "authorization")
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }

    /// "Example: GET Object" of the S3 SigV4 documentation
    /// (sig-v4-header-based-auth.html).
    #[test]
    fn signs_aws_s3_get_object_example() {
        let added = sign(
            "GET",
            &uri("https://examplebucket.s3.amazonaws.com/test.txt"),
            &[("Range", "bytes=0-9")],
            "20130524T000000Z",
            EMPTY_SHA256,
            &example_key(),
            "us-east-1",
        );
        assert_eq!(
            authorization(&added),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,\
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        let sent: Vec<_> = added.iter().map(|(n, v)| (*n, v.as_str())).collect();
        assert_eq!(
            sent[..3],
            [
                ("host", "examplebucket.s3.amazonaws.com"),
                ("x-amz-date", "20130524T000000Z"),
                ("x-amz-content-sha256", EMPTY_SHA256),
            ]
        );
    }

    /// "Example: Get Bucket (List Objects)": a query, sorted.
    #[test]
    fn signs_aws_s3_list_objects_example() {
        let added = sign(
            "GET",
            &uri("https://examplebucket.s3.amazonaws.com/?prefix=J&max-keys=2"),
            &[],
            "20130524T000000Z",
            EMPTY_SHA256,
            &example_key(),
            "us-east-1",
        );
        assert!(
            authorization(&added).ends_with(
                "SignedHeaders=host;x-amz-content-sha256;x-amz-date,\
                 Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
            ),
            "{added:?}"
        );
    }

    /// "Example: GET Bucket Lifecycle": a query name without a value.
    #[test]
    fn signs_aws_s3_lifecycle_example() {
        let added = sign(
            "GET",
            &uri("https://examplebucket.s3.amazonaws.com/?lifecycle"),
            &[],
            "20130524T000000Z",
            EMPTY_SHA256,
            &example_key(),
            "us-east-1",
        );
        assert!(
            authorization(&added).ends_with(
                "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
            ),
            "{added:?}"
        );
    }

    /// "Example: PUT Object": a key with a reserved character, headers in
    /// any case, a payload hash.
    #[test]
    fn signs_aws_s3_put_object_example() {
        let added = sign(
            "PUT",
            &uri("https://examplebucket.s3.amazonaws.com/test$file.text"),
            &[
                ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ],
            "20130524T000000Z",
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
            &example_key(),
            "us-east-1",
        );
        assert!(
            authorization(&added).ends_with(
                "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,\
                 Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
            ),
            "{added:?}"
        );
    }

    #[test]
    fn a_session_token_is_sent_and_signed_and_a_port_is_part_of_the_host() {
        let creds = Credentials {
            session_token: Some("tok/en+=".into()),
            ..example_key()
        };
        let at = |url: &str| {
            sign(
                "GET",
                &uri(url),
                &[],
                "20240102T030405Z",
                EMPTY_SHA256,
                &creds,
                "eu-west-1",
            )
        };
        let added = at("http://127.0.0.1:9000/b/k");
        assert!(added.contains(&("host", "127.0.0.1:9000".to_string())));
        assert!(added.contains(&("x-amz-security-token", "tok/en+=".to_string())));
        let auth = authorization(&added);
        assert!(
            auth.contains("Credential=AKIAIOSFODNN7EXAMPLE/20240102/eu-west-1/s3/aws4_request,"),
            "{auth}"
        );
        assert!(
            auth.contains(
                "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"
            ),
            "{auth}"
        );
        // The default port is not part of the host, as hyper sends it.
        assert!(at("https://h:443/k").contains(&("host", "h".to_string())));
        // The signature covers the token: another token, another signature.
        let other = Credentials {
            session_token: Some("other".into()),
            ..example_key()
        };
        let again = sign(
            "GET",
            &uri("http://127.0.0.1:9000/b/k"),
            &[],
            "20240102T030405Z",
            EMPTY_SHA256,
            &other,
            "eu-west-1",
        );
        assert_ne!(authorization(&again), auth);
    }

    #[test]
    fn canonical_forms_encode_once_and_sort() {
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_uri("/a b/c+d"), "/a%20b/c%2Bd");
        // Already encoded: not encoded twice.
        assert_eq!(canonical_uri("/a%20b/%C3%A9~x"), "/a%20b/%C3%A9~x");
        assert_eq!(
            canonical_query("prefix=a%2Fb%2F&list-type=2&continuation-token=x%2By%3D"),
            "continuation-token=x%2By%3D&list-type=2&prefix=a%2Fb%2F"
        );
        assert_eq!(canonical_query("prefix=a/b"), "prefix=a%2Fb");
        assert_eq!(canonical_value("  a   b "), "a b");
        assert_eq!(encode("llama/v1/x y&z.bin", true), "llama/v1/x%20y%26z.bin");
        assert_eq!(encode("a/b~", false), "a%2Fb~");
        assert_eq!(decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn the_date_is_utc_in_the_basic_format() {
        let at = |secs| amz_date(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(1_369_353_600), "20130524T000000Z");
        assert_eq!(at(1_709_251_199), "20240229T235959Z");
        assert_eq!(at(0), "19700101T000000Z");
    }

    #[test]
    fn a_listing_page_is_read_with_entities_and_paging() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>models</Name><Prefix>llama/v1/</Prefix><KeyCount>3</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken><Contents><Key>llama/v1/</Key><LastModified>2024-07-23T10:00:00.000Z</LastModified><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>0</Size><StorageClass>STANDARD</StorageClass></Contents><Contents><Key>llama/v1/a &amp; b&lt;c&gt;&#x0D;.bin</Key><ETag>"abc-2"</ETag><Size>17</Size></Contents></ListBucketResult>"#;
        let page = parse_page(xml).expect("parses");
        assert!(page.truncated);
        assert_eq!(
            page.next.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
        assert_eq!(
            page.objects,
            [
                Object {
                    key: "llama/v1/".into(),
                    size: 0,
                    etag: Some("d41d8cd98f00b204e9800998ecf8427e".into()),
                },
                Object {
                    key: "llama/v1/a & b<c>\r.bin".into(),
                    size: 17,
                    etag: Some("abc-2".into()),
                },
            ]
        );
        let last = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
        assert_eq!(
            parse_page(last),
            Ok(Page {
                objects: vec![],
                truncated: false,
                next: None
            })
        );
        assert!(parse_page("<html>not S3</html>").is_err());
        assert!(parse_page("<ListBucketResult><Contents><Key>k</Key></Contents>").is_err());
        assert!(parse_page("<ListBucketResult><IsTruncated>maybe</IsTruncated>").is_err());
    }

    #[test]
    fn entities_are_undone_and_unknown_ones_refused() {
        assert_eq!(
            unescape("&amp;&lt;&gt;&quot;&apos;&#65;&#x42;").as_deref(),
            Ok("&<>\"'AB")
        );
        assert!(unescape("a &nbsp; b").is_err());
        assert!(unescape("a & b").is_err());
        assert!(unescape("&#xD800;").is_err(), "no surrogates");
    }

    #[test]
    fn errors_carry_s3s_reason_and_sort_into_retry_or_give_up() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
        assert_eq!(
            refused("s3://m/p", StatusCode::FORBIDDEN, body),
            Failure::Permanent(
                "s3://m/p answered 403 Forbidden (AccessDenied: Access Denied)".into()
            )
        );
        assert_eq!(
            refused(
                "s3://m/p",
                StatusCode::SERVICE_UNAVAILABLE,
                b"<Error><Code>SlowDown</Code></Error>"
            ),
            Failure::Retryable("s3://m/p answered 503 Service Unavailable (SlowDown)".into())
        );
        assert_eq!(
            refused("s3://m/p", StatusCode::NOT_FOUND, b""),
            Failure::Permanent("s3://m/p answered 404 Not Found".into())
        );
    }

    #[test]
    fn configuration_comes_from_the_environment_with_fallbacks() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            S3Config::from_lookup(move |name| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            })
        };
        let none = env(&[]);
        assert_eq!(none.region(), "us-east-1");
        assert!(matches!(none.signer(), Ok(None)));
        let b = none.bucket("models").expect("addressable");
        assert_eq!(
            b.object_url("llama/v1/a b.bin"),
            "https://models.s3.us-east-1.amazonaws.com/llama/v1/a%20b.bin"
        );
        assert_eq!(
            b.list_url("llama/v1/", Some("t/k+=")),
            "https://models.s3.us-east-1.amazonaws.com/?list-type=2&prefix=llama%2Fv1%2F&continuation-token=t%2Fk%2B%3D"
        );
        let dotted = none.bucket("my.models").expect("addressable");
        assert_eq!(
            dotted.object_url("k"),
            "https://s3.us-east-1.amazonaws.com/my.models/k"
        );

        let c = env(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "SECRET"),
            ("AWS_SESSION_TOKEN", ""),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://minio:9000/"),
        ]);
        assert_eq!(c.region(), "eu-west-1");
        assert_eq!(c.session_token, None, "an empty value is unset");
        assert!(matches!(c.signer(), Ok(Some(_))));
        let b = c.bucket("models").expect("addressable");
        assert_eq!(b.object_url("a/b"), "http://minio:9000/models/a/b");
        assert_eq!(
            b.list_url("a/", None),
            "http://minio:9000/models?list-type=2&prefix=a%2F"
        );

        let both = env(&[
            ("AWS_REGION", "ap-south-1"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://generic:9000"),
            ("AWS_ENDPOINT_URL_S3", "https://s3.example"),
        ]);
        assert_eq!(both.region(), "ap-south-1");
        assert_eq!(both.endpoint.as_deref(), Some("https://s3.example"));

        assert!(env(&[("AWS_ACCESS_KEY_ID", "AKID")]).signer().is_err());
        assert!(env(&[("AWS_SECRET_ACCESS_KEY", "S")]).signer().is_err());
        assert!(
            env(&[("AWS_ENDPOINT_URL", "minio:9000")])
                .bucket("b")
                .is_err()
        );
        assert!(env(&[("AWS_REGION", "evil.com/x")]).bucket("b").is_err());
    }

    #[test]
    fn the_debug_form_hides_the_secret_key_and_token() {
        let c = S3Config {
            access_key_id: Some("AKID".into()),
            secret_access_key: Some("very-secret".into()),
            session_token: Some("secret-token".into()),
            region: None,
            endpoint: None,
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
        assert!(!shown.contains("secret-token"), "{shown}");
        assert!(
            shown.contains(r#"secret_access_key: Some("<set>")"#),
            "{shown}"
        );
        assert!(shown.contains(r#"session_token: Some("<set>")"#), "{shown}");
        assert!(shown.contains("AKID"), "{shown}");
    }
}
