//! State shared by the HTTP handlers, watch tasks and the garbage collector.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::counts::Counter;
use crate::faults::Faults;
use crate::pause::PauseGate;
use crate::store::Store;

pub(crate) struct Shared {
    store: Mutex<Store>,
    pub counter: Counter,
    /// Requests that arrived over TCP only (see `http::OverTcp`).
    pub tcp_counter: Counter,
    pub faults: Faults,
    pub gate: PauseGate,
    pub holds: crate::pause::Holds,
    pub outage: crate::pause::Outage,
    pub pages: crate::ops::read::Pages,
    pub gc_wake: Arc<Notify>,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Flipped to true when the last `FakeApiServer` handle is dropped.
    pub shutdown: watch::Sender<bool>,
}

impl Shared {
    pub fn new(store: Store, gc_wake: Arc<Notify>, bookmark_interval: Duration) -> Self {
        Shared {
            store: Mutex::new(store),
            counter: Counter::default(),
            tcp_counter: Counter::default(),
            faults: Faults::default(),
            gate: PauseGate::default(),
            holds: Default::default(),
            outage: Default::default(),
            pages: Default::default(),
            gc_wake,
            bookmark_interval,
            shutdown: watch::Sender::new(false),
        }
    }

    /// Locks the store. A panic elsewhere while holding the lock would be a
    /// bug in the fake; keep serving rather than poisoning every test.
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves when the server is shutting down.
    pub async fn stopped(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}
