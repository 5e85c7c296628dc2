//! What status says of a model's weights: the download's progress, with
//! its rate and time left, and why it failed when it did.
//!
//! People read it in `kubectl get` (the Weights column) and in the Ready
//! condition, so every figure is also spelled out in one line of text, the
//! way a person says it: "42% of 86.0 GiB, 410.0 MiB/s, about 2 min left".

use super::diagnosis::Problem;
use super::reasons;
use crate::api::ModelWeightsStatus;

/// A download's figures, as the fetch Job last reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub done_bytes: u64,
    /// 0 until the source's files are listed.
    pub total_bytes: u64,
    /// 0 until measured.
    pub bytes_per_second: u64,
}

/// Where the spec's source stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Download {
    /// Nothing runs yet: the Job is not created or observed, or its pod
    /// waits (for its claim to bind, a node, its image). The text says which.
    Pending(String),
    /// The Job's pod runs; its figures once it has printed any.
    Running(Option<Progress>),
    /// Every file is in the cache and verified.
    Complete(Option<Progress>),
    /// The Job gave up. `too_small` when the claim cannot hold the model.
    Failed { too_small: bool, message: String },
}

/// The weights as observed for one ModelService with `model.source`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightsSeen {
    /// The spec's source.
    pub uri: String,
    /// `None` for a pvc:// source, which is mounted, not downloaded.
    pub download: Option<Download>,
    /// The source the serving pods read now, when that is known.
    pub serving: Option<String>,
}

impl WeightsSeen {
    /// Whether the spec's source is not ready to serve yet.
    pub fn waiting(&self) -> bool {
        matches!(
            self.download,
            Some(Download::Pending(_) | Download::Running(_))
        )
    }

    /// A failed download: it needs a human (a bigger claim, a token, a
    /// source that exists), so it is Degraded and names the cause.
    pub fn problem(&self) -> Option<Problem> {
        let Some(Download::Failed { too_small, message }) = &self.download else {
            return None;
        };
        let serving = self.serving_note();
        Some(if *too_small {
            Problem {
                reason: reasons::WEIGHTS_VOLUME_TOO_SMALL,
                message: format!(
                    "the weights of {} do not fit in the cache: {message}; raise spec.model.cache.size, and a new download keeps what is already there{serving}",
                    self.uri
                ),
            }
        } else {
            Problem {
                reason: reasons::WEIGHTS_DOWNLOAD_FAILED,
                message: format!(
                    "the download of {} failed: {message}; a new source, cache size or credentialsSecret starts a new download, and deleting the download Job retries this one{serving}",
                    self.uri
                ),
            }
        })
    }

    /// Ready's message while the download runs or waits.
    pub fn waiting_message(&self) -> Option<String> {
        let what = match self.download.as_ref()? {
            Download::Pending(why) => {
                format!("the download of {} has not started: {why}", self.uri)
            }
            Download::Running(Some(p)) if p.total_bytes > 0 => {
                format!(
                    "downloading the weights of {}: {}",
                    self.uri,
                    progress_text(p)
                )
            }
            Download::Running(_) => {
                format!("downloading the weights of {}: listing its files", self.uri)
            }
            _ => return None,
        };
        let after = if self.serving.as_deref().is_some_and(|s| s != self.uri) {
            "; the previous weights keep serving, and the pods roll once it is complete"
        } else {
            "; the pods start once it is complete"
        };
        Some(format!("{what}{after}"))
    }

    fn serving_note(&self) -> &'static str {
        if self.serving.as_deref().is_some_and(|s| s != self.uri) {
            "; the previous weights keep serving"
        } else {
            ""
        }
    }

    /// `status.model`.
    pub fn report(&self) -> ModelWeightsStatus {
        let figures = match &self.download {
            Some(Download::Running(p) | Download::Complete(p)) => *p,
            _ => None,
        };
        let (phase, progress, message) = match &self.download {
            None => ("Mounted", None, None),
            Some(Download::Pending(why)) => (
                "Pending",
                Some("waiting to start".to_string()),
                Some(why.clone()),
            ),
            Some(Download::Running(p)) => (
                "Downloading",
                Some(
                    p.filter(|p| p.total_bytes > 0)
                        .map_or_else(|| "listing files".to_string(), |p| progress_text(&p)),
                ),
                None,
            ),
            Some(Download::Complete(p)) => (
                "Complete",
                Some(match p.filter(|p| p.total_bytes > 0) {
                    Some(p) => format!("{} cached", human_bytes(p.total_bytes)),
                    None => "cached".to_string(),
                }),
                None,
            ),
            Some(Download::Failed { too_small, message }) => (
                "Failed",
                Some(
                    if *too_small {
                        "claim too small"
                    } else {
                        "failed"
                    }
                    .to_string(),
                ),
                Some(message.clone()),
            ),
        };
        let as_i64 = |n: u64| i64::try_from(n).ok();
        ModelWeightsStatus {
            source: self.uri.clone(),
            phase: phase.into(),
            done_bytes: figures.and_then(|p| as_i64(p.done_bytes)),
            total_bytes: figures
                .filter(|p| p.total_bytes > 0)
                .and_then(|p| as_i64(p.total_bytes)),
            bytes_per_second: figures
                .filter(|_| phase == "Downloading")
                .filter(|p| p.bytes_per_second > 0)
                .and_then(|p| as_i64(p.bytes_per_second)),
            eta_seconds: figures
                .filter(|_| phase == "Downloading")
                .and_then(|p| eta_seconds(&p))
                .and_then(as_i64),
            progress,
            message,
            serving: self.serving.clone(),
        }
    }
}

/// Seconds left at the current rate; `None` until a rate is measured.
pub fn eta_seconds(p: &Progress) -> Option<u64> {
    if p.bytes_per_second == 0 || p.total_bytes == 0 {
        return None;
    }
    Some(
        p.total_bytes
            .saturating_sub(p.done_bytes)
            .div_ceil(p.bytes_per_second),
    )
}

/// "42% of 86.0 GiB, 410.0 MiB/s, about 2 min left".
pub fn progress_text(p: &Progress) -> String {
    // Rounded down: 100% only once the last byte is in.
    let percent = if p.total_bytes == 0 {
        0
    } else {
        u128::from(p.done_bytes.min(p.total_bytes)) * 100 / u128::from(p.total_bytes)
    };
    let mut text = format!("{percent}% of {}", human_bytes(p.total_bytes));
    if p.done_bytes >= p.total_bytes {
        // Every byte is in; the last file's digest is being checked.
        text.push_str(", verifying");
        return text;
    }
    if p.bytes_per_second > 0 {
        text.push_str(&format!(", {}/s", human_bytes(p.bytes_per_second)));
    }
    if let Some(eta) = eta_seconds(p) {
        text.push_str(&format!(", {}", time_left(eta)));
    }
    text
}

/// "about 2 min left": no false precision for a figure that moves.
fn time_left(seconds: u64) -> String {
    match seconds {
        0..=59 => "less than a minute left".into(),
        60..=5399 => format!("about {} min left", (seconds + 30) / 60),
        _ => format!("about {} h left", (seconds + 1800) / 3600),
    }
}

/// A size for people, in binary units with one decimal: "512 B", "1.5 KiB",
/// "86.0 GiB". Status and the fetch Job's messages say sizes alike.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    // 1023.96 would print as "1024.0": move up a unit before it rounds.
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024 * 1024 * 1024;
    const MIB: u64 = 1024 * 1024;

    fn running(done: u64, total: u64, rate: u64) -> WeightsSeen {
        WeightsSeen {
            uri: "hf://org/m@abc".into(),
            download: Some(Download::Running(Some(Progress {
                done_bytes: done,
                total_bytes: total,
                bytes_per_second: rate,
            }))),
            serving: None,
        }
    }

    #[test]
    fn progress_reads_like_a_person_says_it() {
        let p = Progress {
            done_bytes: 42 * 86 * GIB / 100 + 1,
            total_bytes: 86 * GIB,
            bytes_per_second: 410 * MIB,
        };
        assert_eq!(
            progress_text(&p),
            "42% of 86.0 GiB, 410.0 MiB/s, about 2 min left"
        );
        let early = Progress {
            bytes_per_second: 0,
            ..p
        };
        assert_eq!(progress_text(&early), "42% of 86.0 GiB");
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(GIB - 1), "1.0 GiB");
        assert_eq!(human_bytes(3 * 1024 * GIB), "3.0 TiB");
        assert_eq!(human_bytes(u64::MAX), "16777216.0 TiB");
        assert_eq!(time_left(20), "less than a minute left");
        let done = Progress {
            done_bytes: 86 * GIB,
            ..p
        };
        assert_eq!(progress_text(&done), "100% of 86.0 GiB, verifying");
        assert_eq!(time_left(7200), "about 2 h left");
    }

    #[test]
    fn status_carries_the_figures_and_the_eta() {
        let r = running(50 * MIB, 100 * MIB, 10 * MIB).report();
        assert_eq!(r.phase, "Downloading");
        assert_eq!(r.done_bytes, Some(50 * MIB as i64));
        assert_eq!(r.total_bytes, Some(100 * MIB as i64));
        assert_eq!(r.bytes_per_second, Some(10 * MIB as i64));
        assert_eq!(r.eta_seconds, Some(5));
        assert_eq!(
            r.progress.as_deref(),
            Some("50% of 100.0 MiB, 10.0 MiB/s, less than a minute left")
        );
        let seen = running(50 * MIB, 100 * MIB, 10 * MIB);
        assert!(seen.waiting());
        let m = seen.waiting_message().unwrap();
        assert!(
            m.contains("50% of 100.0 MiB") && m.ends_with("the pods start once it is complete"),
            "{m}"
        );
    }

    #[test]
    fn a_new_revision_says_the_old_one_keeps_serving() {
        let mut seen = running(1, 10, 0);
        seen.serving = Some("hf://org/m@old".into());
        let m = seen.waiting_message().unwrap();
        assert!(m.contains("previous weights keep serving"), "{m}");
        assert_eq!(seen.report().serving.as_deref(), Some("hf://org/m@old"));
    }

    #[test]
    fn a_full_claim_is_named_as_such() {
        let seen = WeightsSeen {
            uri: "hf://org/m@abc".into(),
            download: Some(Download::Failed {
                too_small: true,
                message: "the model needs 86.0 GiB, the claim has 50.0 GiB free of 50.0 GiB".into(),
            }),
            serving: None,
        };
        let p = seen.problem().unwrap();
        assert_eq!(p.reason, reasons::WEIGHTS_VOLUME_TOO_SMALL);
        assert!(
            p.message.contains("needs 86.0 GiB") && p.message.contains("spec.model.cache.size"),
            "{}",
            p.message
        );
        assert!(!seen.waiting());
        let failed = WeightsSeen {
            download: Some(Download::Failed {
                too_small: false,
                message: "404".into(),
            }),
            ..seen
        };
        assert_eq!(
            failed.problem().unwrap().reason,
            reasons::WEIGHTS_DOWNLOAD_FAILED
        );
        assert_eq!(failed.report().phase, "Failed");
    }

    #[test]
    fn complete_and_mounted_sources_wait_for_nothing() {
        let done = WeightsSeen {
            uri: "hf://org/m@abc".into(),
            download: Some(Download::Complete(Some(Progress {
                done_bytes: 2 * GIB,
                total_bytes: 2 * GIB,
                bytes_per_second: 5,
            }))),
            serving: Some("hf://org/m@abc".into()),
        };
        assert!(!done.waiting() && done.problem().is_none());
        let r = done.report();
        assert_eq!(
            (r.phase.as_str(), r.progress.as_deref()),
            ("Complete", Some("2.0 GiB cached"))
        );
        assert_eq!((r.bytes_per_second, r.eta_seconds), (None, None));
        let mounted = WeightsSeen {
            uri: "pvc://models/llama".into(),
            download: None,
            serving: None,
        };
        assert!(!mounted.waiting());
        assert_eq!(mounted.report().phase, "Mounted");
    }
}
