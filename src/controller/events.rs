//! Kubernetes Events on the ModelService: what a person sees in
//! `kubectl describe`. Publishing is best effort: a failed event never fails
//! a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use super::Context;

/// Publishes one event about `reference`.
pub async fn publish(
    ctx: &Context,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, reference).await {
        warn!(error = %e, reason, "could not publish event");
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
