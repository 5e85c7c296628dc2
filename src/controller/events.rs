//! Kubernetes Events on the ModelService: what a person sees in
//! `kubectl describe`.
//!
//! Events are best effort and off the reconcile path. A reconcile hands an
//! event to a bounded queue and goes on; a few background publishers send
//! them. Awaiting each event inline would make every reconcile wait for one
//! extra API round trip per child it touched (see BENCHMARKS.md). When the queue is full (a burst of thousands of objects), new events are
//! dropped and counted, as client-go's broadcaster does: an event must never
//! slow down or fail the work it describes.
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

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tracing::warn;

use crate::metrics::Metrics;

/// Events waiting to be published; client-go's broadcaster keeps 1000 too.
pub const QUEUE: usize = 1000;
/// Events published at once.
pub const PUBLISHERS: usize = 4;

/// One queued event.
struct Pending {
    reference: ObjectReference,
    event: Event,
}

/// The reconcile side of the queue.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::Sender<Pending>,
    metrics: Arc<Metrics>,
}

impl Events {
    /// The queue and its publisher; spawn the publisher. It ends once every
    /// `Events` is dropped and the queue is drained.
    pub fn new(
        client: Client,
        reporter: Reporter,
        metrics: Arc<Metrics>,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (tx, rx) = mpsc::channel::<Pending>(QUEUE);
        let publisher_metrics = metrics.clone();
        let publisher = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|p| (p, rx))
        })
        .for_each_concurrent(PUBLISHERS, move |p| {
            let recorder = Recorder::new(client.clone(), reporter.clone());
            let metrics = publisher_metrics.clone();
            async move {
                match recorder.publish(&p.event, &p.reference).await {
                    Ok(()) => metrics.event("published"),
                    Err(e) => {
                        metrics.event("failed");
                        warn!(error = %e, reason = %p.event.reason, "could not publish event");
                    }
                }
            }
        });
        (Self { tx, metrics }, publisher)
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
        let pending = Pending {
            reference: reference.clone(),
            event,
        };
        if self.tx.try_send(pending).is_err() {
            self.metrics.event("dropped");
        }
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
