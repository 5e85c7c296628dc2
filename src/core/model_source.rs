//! `spec.model.source`: where a model's weights come from, parsed once for
//! both the operator (validation, the cache directory, the Job's name) and
//! the `fetch` command that downloads them.
//!
//! A source must name one immutable set of files. A Hugging Face source
//! carries its revision after `@`, an HTTP file its SHA-256 after
//! `#sha256=` (pip's spelling), so that two pods, or a pod and a restart,
//! can never serve different bytes under one spec. An S3 prefix has no
//! revision of its own: the convention (KServe's, MLflow's) is a prefix per
//! revision, and objects replaced in place under a prefix already in the
//! cache are not fetched again. A claim path is the
//! platform's own pre-filled volume: nothing is downloaded, and its content is
//! whatever the claim holds.

use std::fmt;

/// The longest source URI accepted (also the schema's bound).
pub const MAX_URI: usize = 2048;

/// A parsed `spec.model.source.uri`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `hf://org/name@revision`: a Hugging Face model repository at a revision.
    HuggingFace {
        /// `org/name`.
        repo: String,
        /// A commit, tag or branch (a commit pins it; the others are read once).
        revision: String,
    },
    /// `http(s)://host/path#sha256=<hex>`: one file with its digest.
    Http {
        /// The URL without its fragment.
        url: String,
        /// The file's SHA-256, lowercase hex.
        sha256: String,
    },
    /// `s3://bucket/prefix`: every object under the prefix (or the one
    /// object it names), from S3 or an S3-compatible store.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix, without leading or trailing `/`.
        prefix: String,
    },
    /// `pvc://claim/path`: a directory in an existing claim of the namespace.
    Claim {
        /// The PersistentVolumeClaim's name.
        claim: String,
        /// The directory inside it, without leading or trailing `/` (empty: its root).
        path: String,
    },
}

/// Why a source URI is refused; the text is shown in the InvalidSpec message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadSource(pub String);

impl fmt::Display for BadSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(msg: impl Into<String>) -> BadSource {
    BadSource(msg.into())
}

/// Parses a source URI. Every part is checked here, so that nothing after
/// it (paths on the volume, URLs, object names) sees an unchecked byte.
pub fn parse(uri: &str) -> Result<Source, BadSource> {
    if uri.len() > MAX_URI {
        return Err(bad(format!("is longer than {MAX_URI} characters")));
    }
    if uri.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("contains a space or a control character"));
    }
    if let Some(rest) = uri.strip_prefix("hf://") {
        return hugging_face(rest);
    }
    if uri.starts_with("http://") || uri.starts_with("https://") {
        return http(uri);
    }
    if let Some(rest) = uri.strip_prefix("pvc://") {
        return claim(rest);
    }
    if let Some(rest) = uri.strip_prefix("s3://") {
        return s3(rest);
    }
    Err(bad(
        "must start with hf://, s3://, http://, https:// or pvc:// (for example hf://meta-llama/Llama-3.1-8B-Instruct@<commit>)",
    ))
}

fn hugging_face(rest: &str) -> Result<Source, BadSource> {
    let Some((repo, revision)) = rest.split_once('@') else {
        return Err(bad(
            "hf:// needs a pinned revision after @ (hf://org/name@<commit>), so that every pod serves the same files",
        ));
    };
    let parts: Vec<&str> = repo.split('/').collect();
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 96
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if parts.len() != 2 || !parts.iter().all(|p| name_ok(p)) || repo.contains("..") {
        return Err(bad(
            "hf:// needs org/name, each of letters, digits, '-', '_' and '.'",
        ));
    }
    let rev_ok = !revision.is_empty()
        && revision.len() <= 128
        && !revision.starts_with('.')
        && !revision.contains("..")
        && revision
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !rev_ok {
        return Err(bad(
            "the revision after @ must be a commit, tag or branch of letters, digits, '-', '_' and '.'",
        ));
    }
    Ok(Source::HuggingFace {
        repo: repo.to_string(),
        revision: revision.to_string(),
    })
}

fn http(uri: &str) -> Result<Source, BadSource> {
    let Some((url, fragment)) = uri.split_once('#') else {
        return Err(bad(
            "an http(s) source needs the file's digest as #sha256=<64 hex digits>, so that every pod serves the same bytes",
        ));
    };
    let digest = fragment.strip_prefix("sha256=").unwrap_or("");
    if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad("the fragment must be #sha256=<64 hex digits>"));
    }
    let after_scheme = url.split_once("://").map_or("", |(_, r)| r);
    let (host, path) = after_scheme.split_once('/').unwrap_or((after_scheme, ""));
    if host.is_empty() || host.contains('@') {
        return Err(bad(
            "an http(s) source needs a host (and no user:password@: credentials come from credentialsSecret)",
        ));
    }
    let file = path.split('?').next().unwrap_or("");
    if file.is_empty() || file.ends_with('/') {
        return Err(bad("an http(s) source must name one file"));
    }
    Ok(Source::Http {
        url: url.to_string(),
        sha256: digest.to_ascii_lowercase(),
    })
}

/// An S3 prefix has no revision of its own: a prefix per revision
/// (`s3://models/llama/2024-07-23`) is the pin, and a new prefix is a new
/// download.
fn s3(rest: &str) -> Result<Source, BadSource> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !bucket.starts_with(['-', '.'])
        && !bucket.ends_with(['-', '.']);
    if !bucket_ok {
        return Err(bad(
            "s3:// needs a bucket name (3 to 63 lowercase letters, digits, '-' and '.') then the prefix: s3://<bucket>/<prefix>",
        ));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() || !prefix.split('/').all(segment_ok) {
        return Err(bad(
            "s3:// needs a prefix after the bucket (one per revision, for example s3://models/llama/2024-07-23), of letters, digits, '-', '_' and '.' (no '..')",
        ));
    }
    Ok(Source::S3 {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    })
}

/// One directory name of a path in a source: no `.`, `..` or oddities.
fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn claim(rest: &str) -> Result<Source, BadSource> {
    let (claim, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !is_dns_subdomain(claim) {
        return Err(bad(
            "pvc:// needs the claim's name (a DNS subdomain) then an optional path: pvc://<claim>/<dir>",
        ));
    }
    let path = path.trim_matches('/');
    if !path.is_empty() && !path.split('/').all(segment_ok) {
        return Err(bad(
            "the path after the claim must be directories of letters, digits, '-', '_' and '.' (no '..')",
        ));
    }
    Ok(Source::Claim {
        claim: claim.to_string(),
        path: path.to_string(),
    })
}

impl Source {
    /// Whether a Job downloads it into the cache (everything but a claim).
    pub fn downloads(&self) -> bool {
        !matches!(self, Source::Claim { .. })
    }

    /// The directory of this source in the cache volume: readable, one path
    /// segment, and different for every source, so that a new revision is
    /// written beside the old one while the old one serves.
    pub fn key(&self) -> String {
        let (readable, canonical) = match self {
            Source::HuggingFace { repo, revision } => (
                format!(
                    "{}-{}",
                    repo.rsplit('/').next().unwrap_or(repo),
                    short(revision)
                ),
                format!("hf://{repo}@{revision}"),
            ),
            Source::Http { url, sha256 } => (
                url.rsplit('/')
                    .next()
                    .unwrap_or("file")
                    .split('?')
                    .next()
                    .unwrap_or("file")
                    .to_string(),
                format!("{url}#sha256={sha256}"),
            ),
            Source::S3 { bucket, prefix } => (
                prefix.rsplit('/').next().unwrap_or(bucket).to_string(),
                format!("s3://{bucket}/{prefix}"),
            ),
            Source::Claim { claim, path } => (claim.clone(), format!("pvc://{claim}/{path}")),
        };
        let readable: String = readable
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '-'
                }
            })
            .take(48)
            .collect();
        let readable = readable.trim_start_matches('.');
        format!("{readable}-{}", &stable_hash(&canonical)[..12])
    }

    /// The revision in effect, for status: the commit or tag, or the digest.
    pub fn revision(&self) -> Option<&str> {
        match self {
            Source::HuggingFace { revision, .. } => Some(revision),
            Source::Http { sha256, .. } => Some(sha256),
            Source::S3 { .. } | Source::Claim { .. } => None,
        }
    }
}

/// A Kubernetes object name (RFC 1123 subdomain): claims, Secrets, classes.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn short(s: &str) -> &str {
    s.get(..12).unwrap_or(s)
}

/// FNV-1a, the same stable hash as the fingerprints: 16 hex digits that
/// are the same in every process and release.
pub fn stable_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugging_face_needs_a_revision() {
        assert_eq!(
            parse("hf://meta-llama/Llama-3.1-8B@0e9e39f").unwrap(),
            Source::HuggingFace {
                repo: "meta-llama/Llama-3.1-8B".into(),
                revision: "0e9e39f".into()
            }
        );
        for uri in [
            "hf://meta-llama/Llama",
            "hf://meta-llama/Llama@",
            "hf://Llama@main",
            "hf://a/b/c@main",
            "hf://../x@main",
            "hf://a/b@../../etc",
            "hf://a/b@ma in",
        ] {
            assert!(parse(uri).is_err(), "{uri}");
        }
    }

    #[test]
    fn http_needs_a_digest_and_a_file() {
        let digest = "ab".repeat(32);
        let s = parse(&format!(
            "https://files.example/m/model.gguf#sha256={digest}"
        ))
        .unwrap();
        assert_eq!(
            s,
            Source::Http {
                url: "https://files.example/m/model.gguf".into(),
                sha256: digest.clone()
            }
        );
        assert!(s.key().starts_with("model.gguf-"), "{}", s.key());
        for uri in [
            "https://files.example/m/model.gguf".to_string(),
            "https://files.example/m/model.gguf#sha256=abc".to_string(),
            format!("https://files.example/#sha256={digest}"),
            format!("https://user:pw@files.example/m#sha256={digest}"),
            format!("https:///m#sha256={digest}"),
        ] {
            assert!(parse(&uri).is_err(), "{uri}");
        }
    }

    #[test]
    fn claims_keep_to_their_path() {
        assert_eq!(
            parse("pvc://models/llama/8b/").unwrap(),
            Source::Claim {
                claim: "models".into(),
                path: "llama/8b".into()
            }
        );
        assert_eq!(
            parse("pvc://models").unwrap(),
            Source::Claim {
                claim: "models".into(),
                path: String::new()
            }
        );
        for uri in [
            "pvc://Models/x",
            "pvc://models/../x",
            "pvc://models/a/./b",
            "pvc:///x",
        ] {
            assert!(parse(uri).is_err(), "{uri}");
        }
    }

    #[test]
    fn s3_needs_a_bucket_and_a_prefix() {
        assert_eq!(
            parse("s3://models/llama/2024-07-23/").unwrap(),
            Source::S3 {
                bucket: "models".into(),
                prefix: "llama/2024-07-23".into()
            }
        );
        for uri in [
            "s3://models",
            "s3://models/",
            "s3://Models/x",
            "s3://m/x",
            "s3://models/a/../b",
        ] {
            assert!(parse(uri).is_err(), "{uri}");
        }
        let k = parse("s3://models/llama/2024-07-23").unwrap().key();
        assert!(k.starts_with("2024-07-23-"), "{k}");
    }

    #[test]
    fn other_schemes_say_what_works() {
        let e = parse("ftp://x/y").unwrap_err();
        assert!(e.0.contains("hf://"), "{e}");
    }

    #[test]
    fn keys_differ_per_revision_and_are_one_safe_segment() {
        let a = parse("hf://org/Model_v1@aaaaaaaaaaaaaaaaaaaa").unwrap();
        let b = parse("hf://org/Model_v1@bbbbbbbbbbbbbbbbbbbb").unwrap();
        assert_ne!(a.key(), b.key());
        for k in [a.key(), b.key()] {
            assert!(k.starts_with("Model_v1-"), "{k}");
            assert!(
                !k.contains('/') && !k.starts_with('.') && k.len() <= 63,
                "{k}"
            );
        }
        assert_eq!(
            a.key(),
            parse("hf://org/Model_v1@aaaaaaaaaaaaaaaaaaaa")
                .unwrap()
                .key()
        );
    }
}
