//! Kubernetes Events on the ModelService: what a person sees in
//! `kubectl describe`.
//!
//! Events are off the reconcile path. A reconcile hands an event to a queue
//! and goes on; a few background publishers send them. Awaiting each event
//! inline would make every reconcile wait for one extra API round trip per
//! child it touched (see BENCHMARKS.md). An event must never slow down or
//! fail the work it describes, and it must not be lost either: the operator
//! announces a cause once, when it begins, so a lost announcement is gone
//! for good. Past its bound the queue delays announcements instead of
//! dropping them (see `event_queue`), and a publish that fails for a reason
//! that passes (429, 5xx, a dropped connection) is tried again with backoff.
//!
//! Every event goes through a fresh `Recorder`, with an empty cache. A
//! long-lived one would turn a warning repeated within minutes into one
//! Event with a series count, but it keeps every event it sent for six
//! minutes to do so: with a thousand models waiting for GPUs that cache was
//! the largest single use of memory (4.4 MiB for its hash table alone at
//! N = 1,000, measured with heaptrack; see BENCHMARKS.md). The operator has
//! nothing for a series to fold: a warning is sent when a Degraded cause
//! begins (see `report::degraded_change`), never again while it lasts.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

use super::event_queue::{Pushed, Queue};
use crate::metrics::Metrics;

/// Events kept in order before further ones wait by object and reason;
/// client-go's broadcaster keeps 1000 too (and drops the rest).
pub const QUEUE: usize = 1000;
/// Events published at once.
pub const PUBLISHERS: usize = 4;
/// Tries of one event whose publish fails for a passing reason.
const TRIES: u32 = 5;
/// The wait before the second try; doubled for each further one.
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// One queued event.
struct Pending {
    reference: ObjectReference,
    event: Event,
}

/// What a waiting event is about: one per object and reason.
type Key = (Option<String>, Option<String>, String);

/// Ends the queue when the last `Events` goes.
struct Open(Arc<Queue<Key, Pending>>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The reconcile side of the queue.
#[derive(Clone)]
pub struct Events {
    queue: Arc<Queue<Key, Pending>>,
    _open: Arc<Open>,
    metrics: Arc<Metrics>,
}

impl Events {
    /// The queue (`bound` events in order, then one per object and reason)
    /// and its publisher; spawn the publisher. It ends once every `Events`
    /// is dropped and the queue is drained.
    pub fn new(
        client: Client,
        reporter: Reporter,
        metrics: Arc<Metrics>,
        bound: usize,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let queue = Queue::new(bound);
        let publisher_metrics = metrics.clone();
        let source = queue.clone();
        let publisher =
            futures::stream::unfold(source, |q| async move { q.next().await.map(|p| (p, q)) })
                .for_each_concurrent(PUBLISHERS, move |p| {
                    let recorder = Recorder::new(client.clone(), reporter.clone());
                    let metrics = publisher_metrics.clone();
                    async move { send(&recorder, &p, &metrics).await }
                });
        let open = Arc::new(Open(queue.clone()));
        (
            Self {
                queue,
                _open: open,
                metrics,
            },
            publisher,
        )
    }

    /// Queues one event about `reference`; never waits.
    pub fn publish(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate(note, 1000)),
            action: action.to_string(),
            secondary: None,
        };
        let key = (
            reference.namespace.clone(),
            reference.name.clone(),
            reason.to_string(),
        );
        let pending = Pending {
            reference: reference.clone(),
            event,
        };
        match self.queue.push(key, pending) {
            Pushed::Queued => {}
            Pushed::Delayed => self.metrics.event("delayed"),
            Pushed::Replaced => self.metrics.event("replaced"),
        }
    }
}

/// Publishes one event, trying again while the failure is one that passes.
async fn send(recorder: &Recorder, p: &Pending, metrics: &Metrics) {
    let mut wait = FIRST_RETRY;
    for attempt in 1..=TRIES {
        match recorder.publish(&p.event, &p.reference).await {
            Ok(()) => {
                metrics.event("published");
                return;
            }
            Err(e) if attempt < TRIES && passes(&e) => {
                metrics.event("retried");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) => {
                metrics.event("failed");
                warn!(error = %e, reason = %p.event.reason, "could not publish event");
                return;
            }
        }
    }
}

/// Whether a failed publish may succeed when tried again: the server was
/// busy or unreachable, not refusing this event.
fn passes(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The API server rejects notes over 1 kB.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn truncation_respects_char_boundaries() {
        let s = "é".repeat(600);
        let t = super::truncate(s, 1001);
        assert!(t.len() <= 1001 && t.chars().all(|c| c == 'é'));
    }
}
