//! The progress lines `fetch` prints on stdout, one JSON object a line, for
//! the operator to turn into status while a Job downloads.
//!
//! The counters live in a [`Tracker`] that the download writes and the
//! reporter reads; the rate comes from a sliding window of this process's
//! own bytes, so a resumed download neither reports its earlier run's bytes
//! as speed nor a whole-run average that hides a stall.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How far back the rate looks: long enough to smooth TCP bursts, short
/// enough that a stall shows within seconds.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// One progress report.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Bytes of this source on the volume, from earlier runs too.
    pub done_bytes: u64,
    /// The listing's total (an HTTP file of unknown size counts 0 until known).
    pub total_bytes: u64,
    /// Download rate of this process over the last ~10 s; 0 until measured.
    pub bytes_per_second: u64,
    /// Files complete and verified.
    pub files: u32,
    /// Files in the listing.
    pub total_files: u32,
}

/// The line as printed: `{"progress":{...}}`, so that other lines (none
/// today) can be told apart.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressLine {
    pub progress: Progress,
}

/// Counters shared between the download and the reporter. Atomics, so the
/// download never waits for a report.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    done: AtomicU64,
    total: AtomicU64,
    files: AtomicU32,
    total_files: AtomicU32,
    fetched: AtomicU64,
}

impl Tracker {
    /// What the listing says and what the volume already holds.
    pub fn start(&self, total: u64, total_files: u32, done: u64, files: u32) {
        self.total.store(total, Ordering::Relaxed);
        self.total_files.store(total_files, Ordering::Relaxed);
        self.done.store(done, Ordering::Relaxed);
        self.files.store(files, Ordering::Relaxed);
    }

    /// A size learnt only from the download's response.
    pub fn add_total(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes received and written by this process.
    pub fn wrote(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
        self.fetched.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes thrown away (a part restarted or failing its checksum).
    pub fn discarded(&self, n: u64) {
        let _ = self
            .done
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(d.saturating_sub(n))
            });
    }

    pub fn file_done(&self) {
        self.files.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes fetched by this process (the outcome's `downloadedBytes`).
    pub fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    fn snapshot(&self, bytes_per_second: u64) -> Progress {
        Progress {
            done_bytes: self.done.load(Ordering::Relaxed),
            total_bytes: self.total.load(Ordering::Relaxed),
            bytes_per_second,
            files: self.files.load(Ordering::Relaxed),
            total_files: self.total_files.load(Ordering::Relaxed),
        }
    }
}

/// Bytes per second over a sliding window of `(when, bytes fetched so far)`.
#[derive(Debug)]
pub(crate) struct RateWindow {
    window: Duration,
    samples: VecDeque<(Instant, u64)>,
}

impl RateWindow {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            samples: VecDeque::new(),
        }
    }

    /// Records a sample and returns the rate since the oldest one kept.
    pub fn rate(&mut self, now: Instant, fetched: u64) -> u64 {
        self.samples.push_back((now, fetched));
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|(t, _)| now.duration_since(*t) >= self.window)
        {
            self.samples.pop_front();
        }
        let Some(&(t0, b0)) = self.samples.front() else {
            return 0;
        };
        let secs = now.duration_since(t0).as_secs_f64();
        if secs <= 0.0 {
            return 0;
        }
        (fetched.saturating_sub(b0) as f64 / secs) as u64
    }
}

/// Prints progress lines to the given writer.
pub(crate) struct Reporter<'a, W: Write> {
    out: &'a mut W,
    tracker: &'a Tracker,
    rate: RateWindow,
}

impl<'a, W: Write> Reporter<'a, W> {
    pub fn new(out: &'a mut W, tracker: &'a Tracker) -> Self {
        Self {
            out,
            tracker,
            rate: RateWindow::new(RATE_WINDOW),
        }
    }

    /// Prints one line now. A closed stdout costs the operator its progress
    /// but must not fail the download, so write errors are only logged.
    pub fn print(&mut self) {
        let rate = self.rate.rate(Instant::now(), self.tracker.fetched());
        let line = ProgressLine {
            progress: self.tracker.snapshot(rate),
        };
        let written = serde_json::to_string(&line)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(self.out, "{s}"))
            .and_then(|()| self.out.flush());
        if let Err(e) = written {
            tracing::warn!("cannot write a progress line: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shape_is_camel_case_under_progress() {
        let line = ProgressLine {
            progress: Progress {
                done_bytes: 5,
                total_bytes: 10,
                bytes_per_second: 2,
                files: 1,
                total_files: 3,
            },
        };
        let json = serde_json::to_string(&line).expect("serializes");
        assert_eq!(
            json,
            r#"{"progress":{"doneBytes":5,"totalBytes":10,"bytesPerSecond":2,"files":1,"totalFiles":3}}"#
        );
        assert_eq!(
            serde_json::from_str::<ProgressLine>(&json).expect("parses"),
            line
        );
    }

    #[test]
    fn rate_is_zero_until_measured_then_follows_the_window() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(Duration::from_secs(10));
        assert_eq!(w.rate(t0, 0), 0);
        assert_eq!(w.rate(t0 + Duration::from_secs(2), 2_000), 1_000);
        assert_eq!(w.rate(t0 + Duration::from_secs(4), 4_000), 1_000);
        // Fast for 12 s: the early slow samples leave the window.
        let mut t = t0 + Duration::from_secs(4);
        let mut b = 4_000;
        for _ in 0..6 {
            t += Duration::from_secs(2);
            b += 20_000;
            w.rate(t, b);
        }
        t += Duration::from_secs(2);
        b += 20_000;
        let r = w.rate(t, b);
        assert!((10_000..=10_001).contains(&r), "{r}");
        // A stall shows as a falling rate, then zero.
        for _ in 0..6 {
            t += Duration::from_secs(2);
            w.rate(t, b);
        }
        assert_eq!(w.rate(t + Duration::from_secs(2), b), 0);
    }

    #[test]
    fn tracker_counts_done_and_fetched_apart() {
        let t = Tracker::default();
        t.start(100, 2, 40, 1);
        t.wrote(30);
        t.discarded(50);
        t.add_total(7);
        t.file_done();
        let p = t.snapshot(0);
        assert_eq!(
            (p.done_bytes, p.total_bytes, p.files, p.total_files),
            (20, 107, 2, 2)
        );
        assert_eq!(t.fetched(), 30);
        t.discarded(1_000);
        assert_eq!(t.snapshot(0).done_bytes, 0);
    }

    #[test]
    fn reporter_prints_one_json_line_per_call() {
        let t = Tracker::default();
        t.start(10, 1, 4, 0);
        let mut out = Vec::new();
        let mut r = Reporter::new(&mut out, &t);
        r.print();
        r.print();
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<ProgressLine> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a progress line"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].progress.done_bytes, 4);
        assert_eq!(lines[0].progress.bytes_per_second, 0);
    }
}
