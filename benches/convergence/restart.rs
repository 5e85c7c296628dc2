//! The operator started again over N converged ModelServices, as in an
//! upgrade of the operator (`--restart`).
//!
//! A cold start from an empty namespace lists nothing; a restart lists
//! every watched kind at once, each a page at a time (`--list-page-size`),
//! and fills every cache before the first reconcile. So its peak memory can
//! be above the cold start's, and it is the start that every upgrade pays.
//! A restart should also write nothing: every ModelService is converged,
//! and a write would be a status or a child that the old process left
//! different from what the new one computes (and a changed Deployment
//! template restarts pods).

use std::time::{Duration, Instant};

use super::measure::{memory, requests, writes};
use super::{Operator, Opts, median};

/// What one restart cost.
#[derive(Clone, Copy, Default)]
pub struct Restart {
    /// From the start of the process until `/readyz`.
    pub ready: Duration,
    /// Its writes, from its start until the end of the idle window after
    /// it was ready.
    pub writes: f64,
    /// Its list requests in that time (one per page).
    pub lists: f64,
    /// Its peak RSS (VmHWM), KiB.
    pub peak_kib: u64,
}

/// Waits for `op` (started at `started` over `n` converged ModelServices)
/// to be ready, then for the idle window, and reports what it cost. None
/// if it never got ready.
pub async fn measure(op: &Operator, n: usize, o: &Opts, started: Instant) -> Option<Restart> {
    if !op.ready().await {
        return None;
    }
    let ready = started.elapsed();
    tokio::time::sleep(o.idle).await;
    let counted = requests(&op.metrics());
    let mem = memory(op.child.id());
    let lists: f64 = counted
        .iter()
        .filter(|(k, _)| k.starts_with("list "))
        .map(|(_, v)| v)
        .sum();
    let r = Restart {
        ready,
        writes: writes(&counted),
        lists,
        peak_kib: mem.peak,
    };
    println!();
    println!(
        "**restart** over {n} converged ModelServices: ready after {:.2} s; {:.0} writes and {:.0} list requests in its first {:.0} s after ready; peak RSS {:.1} MiB (RSS now {:.1}, heap {:.1}, binary {:.1})",
        r.ready.as_secs_f64(),
        r.writes,
        r.lists,
        o.idle.as_secs_f64(),
        mem.peak as f64 / 1024.0,
        mem.rss as f64 / 1024.0,
        mem.anon as f64 / 1024.0,
        mem.file as f64 / 1024.0,
    );
    let written: Vec<String> = counted
        .iter()
        .filter(|(k, v)| {
            **v > 0.0
                && !k.starts_with("list ")
                && !k.starts_with("watch ")
                && !k.starts_with("get ")
        })
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect();
    if !written.is_empty() {
        println!("restart writes: {}", written.join("; "));
    }
    Some(r)
}

/// The summary line of the restarts of one N and client.
pub fn row(n: usize, variant: &str, client: &str, restarts: &[Restart]) {
    if restarts.is_empty() {
        return;
    }
    let pick = |f: fn(&Restart) -> f64| {
        let v: Vec<f64> = restarts.iter().map(f).collect();
        let each: Vec<String> = v.iter().map(|x| format!("{x:.1}")).collect();
        format!("{:.1} ({})", median(&v), each.join(", "))
    };
    println!(
        "| {n} | {variant} | {client} | {} s | {} | {} | {} MiB |",
        pick(|r| r.ready.as_secs_f64()),
        pick(|r| r.writes),
        pick(|r| r.lists),
        pick(|r| r.peak_kib as f64 / 1024.0),
    );
}
