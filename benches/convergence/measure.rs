//! What the benchmark reads off the operator: its process statistics from
//! /proc, and its own Prometheus metrics (request counts by verb and
//! resource, the reconcile histogram).

use std::collections::BTreeMap;

/// Memory of a process, in KiB.
pub struct Memory {
    pub rss: u64,
    pub peak: u64,
    /// Heap, stacks and other private memory.
    pub anon: u64,
    /// Pages of the binary and shared libraries.
    pub file: u64,
}

pub fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

/// CPU seconds (user + system) a process ("self" or a pid) has used so far.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime, fields 14 and 15 of stat, in USER_HZ (100 on Linux).
    (ticks(11) + ticks(12)) / 100.0
}

/// The value of one label in a Prometheus sample line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(&format!("{name}=\"")).nth(1)?.split('"').next()
}

fn value(line: &str) -> Option<f64> {
    line.split_whitespace().last()?.parse().ok()
}

/// The sum of every sample of a metric.
pub fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(value)
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0, printed "-0"
}

/// Requests by "verb resource", from `modelservice_api_requests_total`.
pub type Requests = BTreeMap<String, f64>;

pub fn requests(metrics: &str) -> Requests {
    let mut by = Requests::new();
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("modelservice_api_requests_total{"))
    {
        if let (Some(verb), Some(res), Some(v)) = (label(l, "verb"), label(l, "resource"), value(l))
        {
            *by.entry(format!("{verb} {res}")).or_default() += v;
        }
    }
    by
}

/// `later - earlier`, dropping what did not change.
pub fn since(later: &Requests, earlier: &Requests) -> Requests {
    later
        .iter()
        .map(|(k, v)| (k.clone(), v - earlier.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

pub fn writes(r: &Requests) -> f64 {
    r.iter()
        .filter(|(k, _)| WRITE_VERBS.iter().any(|w| k.starts_with(&format!("{w} "))))
        .map(|(_, v)| v)
        .sum::<f64>()
        + 0.0
}

/// "patch deployments 1.00; ..." per ModelService; watches are long-lived
/// streams, not per-object work, so they are left out.
pub fn per_ms(r: &Requests, n: usize) -> String {
    r.iter()
        .filter(|(k, _)| !k.starts_with("watch "))
        .map(|(k, v)| format!("{k} {:.2}", v / n as f64))
        .collect::<Vec<_>>()
        .join("; ")
}

/// p-quantile from a Prometheus histogram's cumulative buckets,
/// interpolated within the bucket.
pub fn quantile(metrics: &str, histogram: &str, q: f64) -> f64 {
    let prefix = format!("{histogram}_bucket");
    let mut buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let le = label(l, "le")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value(l)?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    if total == 0.0 {
        return 0.0;
    }
    let target = q * total;
    let mut prev = (0.0, 0.0);
    for (le, c) in buckets {
        if c >= target {
            if le.is_infinite() {
                return prev.0;
            }
            let frac = if c > prev.1 {
                (target - prev.1) / (c - prev.1)
            } else {
                1.0
            };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, c);
    }
    prev.0
}
