//! The bare-writes baseline, run in the same benchmark run as the operator
//! and interleaved with it: the harness itself does the writes convergence
//! needs, in a fresh namespace, with no operator running.
//!
//! - cold: the N ModelServices are created exactly as in the operator's
//!   cold phase (the same applies, 64 in flight); as each create returns,
//!   the harness server-side applies its Deployment and its Service (the
//!   operator's own bodies, from its pure builders) and merge-patches its
//!   status: 3 writes per object, [`IN_FLIGHT`] objects at a time. Timed from
//!   the first create until all are done.
//! - rollout: the args of all N change as in the operator's rollout phase;
//!   as each spec patch returns, the harness applies the new Deployment and
//!   patches status (2 writes). Timed from the first spec patch.
//!
//! No finalizer is added (the namespace goes without an operator), no
//! Event is sent, nothing is listed, and nothing is watched but what the
//! operator's runs watch too: the harness's three watches of the namespace
//! that convergence is judged from (`tracker.rs`).

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::backend::Backend;
use crate::creates;
use crate::minimal::{apply_children, patch_status};

/// Objects whose writes are in flight at once.
pub const IN_FLIGHT: usize = 24;

/// Cold: creates, then Deployment + Service + status for each.
pub async fn cold(b: &Backend, n: usize) -> Duration {
    let client = b.tcp_client().await;
    let ns = b.namespace().to_string();
    let t = Instant::now();
    creates(b, n, "--v1")
        .for_each_concurrent(IN_FLIGHT, |ms| {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                apply_children(&client, &ns, &ms, true).await;
                patch_status(&client, &ns, &ms).await;
            }
        })
        .await;
    t.elapsed()
}

/// Rollout: the spec patches, then the new Deployment + status for each.
pub async fn rollout(b: &Backend, n: usize) -> Duration {
    let client = b.tcp_client().await;
    let ns = b.namespace().to_string();
    let t = Instant::now();
    creates(b, n, "--v2")
        .for_each_concurrent(IN_FLIGHT, |ms| {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                apply_children(&client, &ns, &ms, false).await;
                patch_status(&client, &ns, &ms).await;
            }
        })
        .await;
    t.elapsed()
}
