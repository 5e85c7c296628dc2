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

/// A window in which requests over TCP fail as they do while a real API
/// server restarts: the process is gone, so nothing is served and the
/// connection is closed. The in-process client (the test's own, the
/// simulator's) is not affected: it stands for the test's view, which waits
/// the restart out.
#[derive(Default)]
pub(crate) struct Outage {
    until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Outage {
    pub fn start(&self, lasting: std::time::Duration) {
        let until = tokio::time::Instant::now() + lasting;
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
    }

    /// Whether the server is down now.
    pub fn is_down(&self) -> bool {
        let until = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.is_some_and(|u| tokio::time::Instant::now() < u)
    }
}

/// Requests of one verb on one resource held until released, the rest
/// served: an API server slow at one thing (event creates under a burst,
/// say) while the test's own reads go on.
#[derive(Default)]
pub(crate) struct Holds {
    held: watch::Sender<Vec<(crate::counts::Verb, String)>>,
}

impl Holds {
    pub fn hold(&self, verb: crate::counts::Verb, resource: &str) {
        self.held
            .send_modify(|h| h.push((verb, resource.to_string())));
    }

    pub fn release(&self, verb: crate::counts::Verb, resource: &str) {
        self.held
            .send_modify(|h| h.retain(|(v, r)| !(*v == verb && r == resource)));
    }

    /// Returns at once unless such requests are held, else when released.
    pub async fn wait_released(&self, verb: crate::counts::Verb, resource: &str) {
        let mut rx = self.held.subscribe();
        let _ = rx
            .wait_for(|h| !h.iter().any(|(v, r)| *v == verb && r == resource))
            .await;
    }
}
