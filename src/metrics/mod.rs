//! Prometheus metrics, all prefixed `modelservice_`.
//!
//! Per-object series are removed when the object is deleted, so a cluster
//! that churns ModelServices does not grow the scrape forever.

mod ready_series;

use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::api::{ModelServiceStatus, condition_types as ct};
use crate::controller::Error;
use crate::core::conditions::find;

/// The operator's metrics and the registry that serves them.
pub struct Metrics {
    pub registry: Registry,
    reconciles: IntCounterVec,
    errors: IntCounterVec,
    duration: Histogram,
    by_ready: IntGaugeVec,
    by_reason: IntGaugeVec,
    child_writes: IntCounterVec,
    leader: IntGauge,
    events: IntCounterVec,
    api_requests: IntCounterVec,
    /// Requests waiting for a place under `--max-requests-in-flight`
    /// (moved by `runtime::in_flight`).
    pub api_requests_waiting: IntGauge,
    watch_errors: IntCounterVec,
    migration_left: IntGauge,
    migration_done: IntGauge,
    surge_decisions: IntCounterVec,
    /// (ready, reason) per namespace/name: the per-model series, and what
    /// the aggregate gauges move each object from.
    states: ready_series::States,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new(
                "modelservice_reconcile_total",
                "Reconciles by result (success or error).",
            ),
            &["result"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "modelservice_reconcile_errors_total",
                "Failed reconciles by error kind.",
            ),
            &["kind"],
        )?;
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "modelservice_reconcile_duration_seconds",
                "Time one reconcile takes.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )?;
        let states = ready_series::States::default();
        let by_ready = IntGaugeVec::new(
            Opts::new(
                "modelservice_resources",
                "ModelServices by Ready condition status.",
            ),
            &["ready"],
        )?;
        let by_reason = IntGaugeVec::new(
            Opts::new(
                "modelservice_condition_reason",
                "ModelServices by the reason of their Ready condition (Available, RollingOut, InsufficientGPU, ...).",
            ),
            &["reason"],
        )?;
        let child_writes = IntCounterVec::new(
            Opts::new(
                "modelservice_child_apply_total",
                "Child apply decisions by kind and outcome (create, update, delete, unchanged = no request sent).",
            ),
            &["kind", "op"],
        )?;
        let leader = IntGauge::new(
            "modelservice_leader",
            "1 while this replica holds the leader lease.",
        )?;
        let events = IntCounterVec::new(
            Opts::new(
                "modelservice_events_total",
                "Kubernetes Events by outcome: published; failed (refused, or still failing after retries); retried (a try that failed for a passing reason); delayed (the queue was full: it waits by object and reason, never dropped); replaced (a newer event of the same object and reason took a delayed one's place).",
            ),
            &["result"],
        )?;
        let api_requests = IntCounterVec::new(
            Opts::new(
                "modelservice_api_requests_total",
                "Requests this operator sent to the API server, by verb, resource and HTTP status code.",
            ),
            &["verb", "resource", "code"],
        )?;
        let api_requests_waiting = IntGauge::new(
            "modelservice_api_requests_waiting",
            "Requests to the API server waiting for a place under --max-requests-in-flight.",
        )?;
        let watch_errors = IntCounterVec::new(
            Opts::new(
                "modelservice_watch_errors_total",
                "Watch errors by resource and kind (list, watch_start, watch_event, watch_stream; expired = a 410 that forced a relist). A rising rate means the operator is not seeing changes.",
            ),
            &["resource", "kind"],
        )?;
        let migration_left = IntGauge::new(
            "modelservice_storage_migration_remaining",
            "ModelServices the storage migration has still to rewrite in the storage version (leader only).",
        )?;
        let migration_done = IntGauge::new(
            "modelservice_storage_migration_complete",
            "1 once every ModelService is stored in the storage version and older versions are gone from the CRD's storedVersions (leader only).",
        )?;
        let surge_decisions = IntCounterVec::new(
            Opts::new(
                "modelservice_surge_decisions_total",
                "Rollouts with surge Auto by decision: surge or replace when the rollout starts (decided from the cluster's nodes and pods; one read serves the rollouts that start within --surge-read-window of it), refuted when a surge's pod waited for GPUs past --surge-grace and the rollout switched to replace.",
            ),
            &["decision"],
        )?;
        for label in ["surge", "replace", "refuted"] {
            surge_decisions.with_label_values(&[label]);
        }
        // Both series exist from the start, so "0 not ready" is a reading.
        for label in ["True", "False"] {
            by_ready.with_label_values(&[label]).set(0);
        }
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(events.clone()))?;
        registry.register(Box::new(api_requests.clone()))?;
        registry.register(Box::new(api_requests_waiting.clone()))?;
        registry.register(Box::new(watch_errors.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(ready_series::ReadySeries::new(states.clone())?))?;
        registry.register(Box::new(by_ready.clone()))?;
        registry.register(Box::new(by_reason.clone()))?;
        registry.register(Box::new(child_writes.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(migration_left.clone()))?;
        registry.register(Box::new(migration_done.clone()))?;
        registry.register(Box::new(surge_decisions.clone()))?;
        Ok(Self {
            registry,
            reconciles,
            errors,
            duration,
            by_ready,
            by_reason,
            child_writes,
            leader,
            events,
            api_requests,
            api_requests_waiting,
            watch_errors,
            migration_left,
            migration_done,
            surge_decisions,
            states,
        })
    }

    pub fn reconciled(&self, took: Duration, error: Option<&Error>) {
        self.duration.observe(took.as_secs_f64());
        match error {
            None => self.reconciles.with_label_values(&["success"]).inc(),
            Some(e) => {
                self.reconciles.with_label_values(&["error"]).inc();
                self.errors.with_label_values(&[e.kind()]).inc();
            }
        }
    }

    pub fn child_write(&self, kind: &str, op: &str) {
        self.child_writes.with_label_values(&[kind, op]).inc();
    }

    pub fn event(&self, result: &str) {
        self.events.with_label_values(&[result]).inc();
    }

    pub fn watch_error(&self, resource: &str, kind: &str) {
        self.watch_errors.with_label_values(&[resource, kind]).inc();
    }

    /// Counts one API request (see `runtime::api_requests`).
    pub fn api_request(&self, verb: &str, resource: &str, code: &str) {
        self.api_requests
            .with_label_values(&[verb, resource, code])
            .inc();
    }

    pub fn storage_migration(&self, remaining: i64, complete: bool) {
        self.migration_left.set(remaining);
        self.migration_done.set(i64::from(complete));
    }

    /// A rollout start decided `surge` or `replace` (see `core::surge`), or
    /// the scheduler `refuted` a surge in force (see `core::refutation`).
    pub fn surge_decision(&self, label: &'static str) {
        self.surge_decisions.with_label_values(&[label]).inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Records what the status says about one ModelService.
    pub fn observe_status(&self, ns: &str, name: &str, status: &ModelServiceStatus) {
        let cond = find(&status.conditions, ct::READY);
        let ready = cond.is_some_and(|c| c.status == "True");
        let reason = cond.map(|c| c.reason.clone()).unwrap_or_default();
        self.tally((ns.to_string(), name.to_string()), Some((ready, reason)));
    }

    /// Drops every series of a deleted ModelService.
    pub fn forget(&self, ns: &str, name: &str) {
        self.tally((ns.to_string(), name.to_string()), None);
    }

    /// Moves one object from its old (ready, reason) to its new one in the
    /// aggregate gauges: constant work per status, however many objects
    /// there are (recounting them all made a cold start quadratic).
    fn tally(&self, key: (String, String), new: Option<(bool, String)>) {
        let Some(mut states) = self.states.lock() else {
            return;
        };
        let old = match &new {
            Some(n) => states.insert(key, n.clone()),
            None => states.remove(&key),
        };
        if old == new {
            return;
        }
        if let Some((ready, reason)) = &old {
            self.by_ready
                .with_label_values(&[ready_label(*ready)])
                .dec();
            let g = self.by_reason.with_label_values(&[reason]);
            g.dec();
            if g.get() <= 0 {
                let _ = self.by_reason.remove_label_values(&[reason]);
            }
        }
        if let Some((ready, reason)) = &new {
            self.by_ready
                .with_label_values(&[ready_label(*ready)])
                .inc();
            self.by_reason.with_label_values(&[reason]).inc();
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

fn ready_label(ready: bool) -> &'static str {
    if ready { "True" } else { "False" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conditions::{Wanted, merge};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn status(ready: bool, reason: &str) -> ModelServiceStatus {
        let now = Time(Timestamp::from_second(1).expect("ts"));
        ModelServiceStatus {
            conditions: merge(&[], &[Wanted::new(ct::READY, ready, reason, "")], 1, &now),
            ..ModelServiceStatus::default()
        }
    }

    #[test]
    fn gauges_follow_status_and_forget_deleted_objects() {
        let m = Metrics::new().expect("metrics");
        m.observe_status("ml", "a", &status(true, "Available"));
        m.observe_status("ml", "b", &status(false, "InsufficientGPU"));
        let text = m.render();
        assert!(
            text.contains("modelservice_ready{name=\"a\",namespace=\"ml\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("modelservice_ready{name=\"b\",namespace=\"ml\"} 0"),
            "{text}"
        );
        assert!(text.contains("# TYPE modelservice_ready gauge"), "{text}");
        assert!(
            text.contains("modelservice_condition_reason{reason=\"InsufficientGPU\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("modelservice_resources{ready=\"False\"} 1"),
            "{text}"
        );
        m.forget("ml", "b");
        let text = m.render();
        assert!(!text.contains("name=\"b\""), "{text}");
        assert!(!text.contains("reason=\"InsufficientGPU\""), "{text}");
        assert!(
            text.contains("modelservice_resources{ready=\"False\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn aggregates_move_with_each_object_and_never_double_count() {
        let m = Metrics::new().expect("metrics");
        for _ in 0..3 {
            m.observe_status("ml", "a", &status(false, "RollingOut"));
        }
        m.observe_status("ml", "b", &status(false, "RollingOut"));
        let text = m.render();
        assert!(
            text.contains("modelservice_condition_reason{reason=\"RollingOut\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("modelservice_resources{ready=\"False\"} 2"),
            "{text}"
        );
        m.observe_status("ml", "a", &status(true, "Available"));
        let text = m.render();
        assert!(
            text.contains("modelservice_condition_reason{reason=\"RollingOut\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("modelservice_condition_reason{reason=\"Available\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("modelservice_resources{ready=\"True\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("modelservice_resources{ready=\"False\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn reconciles_are_counted_by_result() {
        let m = Metrics::new().expect("metrics");
        m.reconciled(Duration::from_millis(3), None);
        let text = m.render();
        assert!(
            text.contains("modelservice_reconcile_total{result=\"success\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("modelservice_reconcile_duration_seconds_count 1"),
            "{text}"
        );
    }
}
