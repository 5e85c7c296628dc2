//! A gate that holds every request (and watch delivery) while paused.
//!
//! Simulates an API server that is up (connections are accepted) but not
//! answering, e.g. during an etcd stall, so tests can check operator
//! timeouts and what happens when the backlog is released.

use tokio::sync::watch;

pub(crate) struct PauseGate {
    tx: watch::Sender<bool>,
}

impl Default for PauseGate {
    fn default() -> Self {
        PauseGate {
            tx: watch::Sender::new(false),
        }
    }
}

impl PauseGate {
    pub fn pause(&self) {
        self.tx.send_replace(true);
    }

    pub fn resume(&self) {
        self.tx.send_replace(false);
    }

    /// Returns at once when not paused, else when `resume` is called.
    pub async fn wait_resumed(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|paused| !*paused).await;
    }
}
