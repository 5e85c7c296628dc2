//! What files a source has: their paths on the volume, where each downloads
//! from, and the size and digest each must have.
//!
//! Paths come from a server, so each is checked before it names anything on
//! the volume: a hostile or broken listing must not write outside the
//! model's directory, nor over the files `fetch` keeps beside the model.

use std::collections::HashSet;

use http::{HeaderMap, Method, Uri, header};
use serde::Deserialize;

use super::client::{self, Client};
use super::marker::MARKER;
use super::outcome::Failure;

/// One file to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteFile {
    /// Relative path under the model's directory, checked by [`check_path`].
    pub path: String,
    pub url: String,
    /// Known from the listing, or from the response for an HTTP file.
    pub size: Option<u64>,
    /// Lowercase hex SHA-256, when the source gives one.
    pub sha256: Option<String>,
}

/// One entry of the Hugging Face tree API.
#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    oid: String,
    size: Option<u64>,
}

/// The files of `repo` at `revision`, following the API's pagination.
pub(crate) async fn hugging_face(
    client: &Client,
    endpoint: &str,
    repo: &str,
    revision: &str,
) -> Result<Vec<RemoteFile>, Failure> {
    let endpoint = endpoint.trim_end_matches('/');
    let mut next = Some(format!(
        "{endpoint}/api/models/{repo}/tree/{revision}?recursive=true"
    ));
    let mut files = Vec::new();
    while let Some(url) = next.take() {
        let (headers, body) = client.get_json(&url).await?;
        let entries: Vec<Entry> = serde_json::from_slice(&body).map_err(|e| {
            Failure::Permanent(format!("{} is no file listing: {e}", client::redact(&url)))
        })?;
        for e in entries.into_iter().filter(|e| e.kind == "file") {
            check_path(&e.path).map_err(Failure::Permanent)?;
            files.push(RemoteFile {
                url: format!(
                    "{endpoint}/{repo}/resolve/{revision}/{}",
                    encode_path(&e.path)
                ),
                size: Some(e.lfs.as_ref().and_then(|l| l.size).unwrap_or(e.size)),
                sha256: e.lfs.map(|l| l.oid.to_ascii_lowercase()),
                path: e.path,
            });
        }
        let base: Uri = url
            .parse()
            .map_err(|e| Failure::Permanent(format!("{url}: {e}")))?;
        next = next_link(&headers)
            .and_then(|l| client::join(&base, &l))
            .map(|u| u.to_string());
    }
    check_distinct(&files).map_err(Failure::Permanent)?;
    Ok(files)
}

/// The one file of an HTTP source. Its size comes from a HEAD when the
/// server tells it; a server that refuses HEAD still serves the GET.
pub(crate) async fn http_file(
    client: &Client,
    url: &str,
    sha256: &str,
) -> Result<RemoteFile, Failure> {
    let name = url
        .split(['?', '#'])
        .next()
        .and_then(|u| u.rsplit('/').next())
        .unwrap_or("");
    check_path(name).map_err(Failure::Permanent)?;
    let head = client.send(Method::HEAD, url, None).await?;
    let size = match head.status().as_u16() {
        401 | 403 | 404 => {
            client::check_status(url, head.status())?;
            None
        }
        _ if head.status().is_success() => content_length(head.headers()),
        _ => None,
    };
    Ok(RemoteFile {
        path: name.to_string(),
        url: url.to_string(),
        size,
        sha256: Some(sha256.to_string()),
    })
}

pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Refuses a path that could leave the model's directory or that is not
/// one plain relative file path.
pub(crate) fn check_path(path: &str) -> Result<(), String> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\0')
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
        || path == MARKER;
    if bad {
        return Err(format!(
            "the source lists a file at {path:?}: not a plain relative path, refused"
        ));
    }
    Ok(())
}

/// Two files must not share a path, nor may one be another's partial
/// download (`x` and `x.part`).
pub(crate) fn check_distinct(files: &[RemoteFile]) -> Result<(), String> {
    let paths: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    if paths.len() != files.len() {
        return Err("the source lists a file twice".into());
    }
    match files
        .iter()
        .find(|f| paths.contains(format!("{}.part", f.path).as_str()))
    {
        Some(f) => Err(format!(
            "the source lists both {0:?} and {0:?}.part, which fetch cannot tell apart",
            f.path
        )),
        None => Ok(()),
    }
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find(|part| {
            part.split(';')
                .skip(1)
                .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"))
        })
        .and_then(|part| {
            let (_, rest) = part.split_once('<')?;
            let (url, _) = rest.split_once('>')?;
            Some(url.to_string())
        })
}

/// Percent-encodes each segment of a checked path for a URL.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn hostile_paths_are_refused() {
        for p in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "a/",
            "./a",
            "a\0b",
            ".modelservice-complete",
        ] {
            assert!(check_path(p).is_err(), "{p:?}");
        }
        for p in [
            "config.json",
            "a/b/model-00001.safetensors",
            ".gitattributes",
            "x..y",
        ] {
            assert_eq!(check_path(p), Ok(()), "{p:?}");
        }
    }

    #[test]
    fn a_file_may_not_shadow_another_ones_part() {
        let f = |p: &str| RemoteFile {
            path: p.into(),
            url: String::new(),
            size: None,
            sha256: None,
        };
        assert!(check_distinct(&[f("a"), f("b")]).is_ok());
        assert!(check_distinct(&[f("a"), f("a.part")]).is_err());
        assert!(check_distinct(&[f("a"), f("a")]).is_err());
    }

    #[test]
    fn pagination_follows_rel_next() {
        let mut h = HeaderMap::new();
        h.insert(
            header::LINK,
            HeaderValue::from_static(
                r#"<https://h/api/x?cursor=1>; rel="prev", <https://h/api/x?cursor=3>; rel="next""#,
            ),
        );
        assert_eq!(next_link(&h).as_deref(), Some("https://h/api/x?cursor=3"));
        h.insert(
            header::LINK,
            HeaderValue::from_static(r#"<https://h/a>; rel="prev""#),
        );
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn tree_entries_keep_files_and_their_lfs_digest() {
        let json = r#"[{"type":"directory","path":"sub","size":0},
            {"type":"file","path":"sub/w.bin","size":5,"lfs":{"oid":"AB","size":5}},
            {"type":"file","path":"config.json","size":2}]"#;
        let entries: Vec<Entry> = serde_json::from_str(json).expect("parses");
        let files: Vec<_> = entries.iter().filter(|e| e.kind == "file").collect();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].lfs.as_ref().map(|l| l.oid.as_str()), Some("AB"));
        assert!(files[1].lfs.is_none());
    }

    #[test]
    fn paths_are_percent_encoded_per_segment() {
        assert_eq!(encode_path("a b/c+d.bin"), "a%20b/c%2Bd.bin");
        assert_eq!(encode_path("é"), "%C3%A9");
    }
}
