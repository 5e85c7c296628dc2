//! One shutdown signal shared by the controller, the HTTP server and the
//! lease: SIGTERM or SIGINT flips it once, and every part stops in order.

use tokio::sync::watch;

/// A cloneable handle that resolves once shutdown was requested.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// The side that requests shutdown.
#[derive(Debug)]
pub struct Trigger {
    tx: watch::Sender<bool>,
}

/// A new, unfired signal.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
}

impl Trigger {
    pub fn fire(&self) {
        let _ = self.tx.send(true);
    }
}

impl Shutdown {
    /// Resolves when shutdown is requested (or the trigger is gone).
    pub async fn wait(mut self) {
        let _ = self.rx.wait_for(|fired| *fired).await;
    }

    pub fn is_requested(&self) -> bool {
        *self.rx.borrow()
    }
}

/// Fires `trigger` on the first SIGTERM or SIGINT.
pub fn on_signals(trigger: Trigger) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received; shutting down"),
        }
        trigger.fire();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_signal() {
        let (t, s) = channel();
        let a = s.clone();
        assert!(!s.is_requested());
        let waiter = tokio::spawn(a.wait());
        t.fire();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("resolved")
            .expect("joined");
        assert!(s.is_requested());
    }
}
