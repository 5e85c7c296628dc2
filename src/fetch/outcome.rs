//! How a `fetch` run ends: one JSON line in the termination message (which
//! the kubelet copies into the pod's status, where the operator reads it)
//! and an exit code that tells a Job's retry worth from a hopeless one.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::space::Room;

/// Retries exhausted, a checksum mismatch, a local I/O error: the Job may
/// try again.
pub const EXIT_FAILED: i32 = 1;
/// The volume cannot hold the model: only a bigger claim helps.
pub const EXIT_VOLUME_TOO_SMALL: i32 = crate::core::weights::EXIT_VOLUME_TOO_SMALL;
/// The source cannot work as written (401/403/404, a bad or hostile
/// source): retrying the Job would only fail again.
pub const EXIT_PERMANENT: i32 = crate::core::weights::EXIT_PERMANENT;

/// The kubelet keeps at most 4096 bytes of a termination message; the
/// message is cut well below so the JSON around it always fits.
const MAX_MESSAGE: usize = 1024;

/// The result in the termination message.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    Complete,
    VolumeTooSmall,
    Failed,
}

/// The termination message, e.g.
/// `{"result":"Complete","totalBytes":N,"files":n,"downloadedBytes":M}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub result: OutcomeKind,
    /// The listing's total (Complete; VolumeTooSmall when known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Files in the listing (Complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u32>,
    /// Bytes this run fetched; 0 when everything was already there (Complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downloaded_bytes: Option<u64>,
    /// Bytes still to download when refused (VolumeTooSmall).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed_bytes: Option<u64>,
    /// Room the volume had for them (VolumeTooSmall).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// For people (VolumeTooSmall, Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Outcome {
    pub fn complete(total_bytes: u64, files: u32, downloaded_bytes: u64) -> Self {
        Self {
            total_bytes: Some(total_bytes),
            files: Some(files),
            downloaded_bytes: Some(downloaded_bytes),
            ..Self::empty(OutcomeKind::Complete)
        }
    }

    pub fn volume_too_small(total: u64, needed: u64, available: u64, message: String) -> Self {
        Self {
            total_bytes: Some(total),
            needed_bytes: Some(needed),
            available_bytes: Some(available),
            message: Some(short(message)),
            ..Self::empty(OutcomeKind::VolumeTooSmall)
        }
    }

    pub fn failed(message: String) -> Self {
        Self {
            message: Some(short(message)),
            ..Self::empty(OutcomeKind::Failed)
        }
    }

    fn empty(result: OutcomeKind) -> Self {
        Self {
            result,
            total_bytes: None,
            files: None,
            downloaded_bytes: None,
            needed_bytes: None,
            available_bytes: None,
            message: None,
        }
    }

    /// Writes the one-line message. A pod without a writable termination
    /// log still has its exit code and stderr, so failure is only logged.
    pub fn write(&self, path: &Path) {
        let written = serde_json::to_string(self)
            .map_err(std::io::Error::other)
            .and_then(|line| std::fs::write(path, line + "\n"));
        if let Err(e) = written {
            tracing::warn!("cannot write the termination message to {path:?}: {e}");
        }
    }
}

/// Why a step of the fetch stopped, which decides the outcome, the exit
/// code and whether the step is tried again in-process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Worth another try soon: a dropped connection, a 5xx, a stall, a
    /// checksum mismatch.
    Retryable(String),
    /// Will fail the same way every time: 401/403/404, a bad source.
    Permanent(String),
    /// Local trouble another pod may not have (exit 1, no in-process retry).
    Fatal(String),
    /// The model does not fit: the outcome is VolumeTooSmall.
    NoRoom(Room),
    /// A write found the volume full; the fetch measures the room again and
    /// turns it into [`Failure::NoRoom`].
    DiskFull(String),
}

impl Failure {
    pub fn message(&self) -> String {
        match self {
            Failure::Retryable(m)
            | Failure::Permanent(m)
            | Failure::Fatal(m)
            | Failure::DiskFull(m) => m.clone(),
            Failure::NoRoom(room) => room.message(),
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Permanent(_) => EXIT_PERMANENT,
            Failure::NoRoom(_) | Failure::DiskFull(_) => EXIT_VOLUME_TOO_SMALL,
            Failure::Retryable(_) | Failure::Fatal(_) => EXIT_FAILED,
        }
    }
}

fn short(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shapes_match_what_the_operator_parses() {
        let ok = serde_json::to_string(&Outcome::complete(10, 2, 4)).expect("json");
        assert_eq!(
            ok,
            r#"{"result":"Complete","totalBytes":10,"files":2,"downloadedBytes":4}"#
        );
        let small =
            serde_json::to_string(&Outcome::volume_too_small(9, 8, 5, "m".into())).expect("json");
        assert_eq!(
            small,
            r#"{"result":"VolumeTooSmall","totalBytes":9,"neededBytes":8,"availableBytes":5,"message":"m"}"#
        );
        let failed = serde_json::to_string(&Outcome::failed("no".into())).expect("json");
        assert_eq!(failed, r#"{"result":"Failed","message":"no"}"#);
        let back: Outcome = serde_json::from_str(&small).expect("parses");
        assert_eq!(back.result, OutcomeKind::VolumeTooSmall);
        assert_eq!(back.available_bytes, Some(5));
    }

    #[test]
    fn long_messages_are_cut_so_the_line_fits_the_kubelet_limit() {
        let o = Outcome::failed("é".repeat(3000));
        let line = serde_json::to_string(&o).expect("json");
        assert!(line.len() < 4096, "{}", line.len());
        assert!(o.message.as_deref().is_some_and(|m| m.ends_with('…')));
    }

    #[test]
    fn exit_codes_follow_the_kind_of_failure() {
        assert_eq!(Failure::Permanent("x".into()).exit_code(), EXIT_PERMANENT);
        assert_eq!(Failure::Retryable("x".into()).exit_code(), EXIT_FAILED);
        assert_eq!(Failure::Fatal("x".into()).exit_code(), EXIT_FAILED);
        assert_eq!(
            Failure::DiskFull("x".into()).exit_code(),
            EXIT_VOLUME_TOO_SMALL
        );
    }

    #[test]
    fn the_message_file_holds_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("termination-log");
        Outcome::complete(1, 1, 1).write(&path);
        let text = std::fs::read_to_string(&path).expect("written");
        assert_eq!(text.lines().count(), 1);
        let back: Outcome = serde_json::from_str(text.trim()).expect("parses");
        assert_eq!(back, Outcome::complete(1, 1, 1));
        // An unwritable path is logged, not a panic or an error.
        Outcome::failed("x".into()).write(&dir.path().join("no/such/dir"));
        assert!(!dir.path().join("no").exists());
    }
}
