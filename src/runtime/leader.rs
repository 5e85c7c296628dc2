//! Leader election on a `coordination.k8s.io/v1` Lease, with kube-lease-manager.
//!
//! Every replica keeps its caches warm; only the holder reconciles (see
//! `controller::Leadership`). Two additions to the crate's own loop:
//! - standbys also watch the Lease, so a holder that releases it on SIGTERM is
//!   replaced within a second or two instead of after the lease expires;
//! - a holder that loses the lease is reported to `run`, which stops the
//!   process (fail-stop): a replica that may no longer write must not finish
//!   half a reconcile.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::controller::Leadership;
use crate::controller::apply::FIELD_MANAGER;
use crate::metrics::Metrics;
use std::sync::Arc;

/// The Lease's name, fixed by the API contract.
pub const LEASE_NAME: &str = "modelservice-operator";

/// Settings of the election.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
}

/// A running election.
pub struct Election {
    /// Fires `true` each time this replica becomes the leader.
    pub acquired: watch::Receiver<bool>,
    /// Receives once if the lease is lost while leading.
    pub lost: mpsc::Receiver<()>,
    release: Option<oneshot::Sender<oneshot::Sender<()>>>,
}

impl Election {
    /// Releases the lease (if held) and stops campaigning; waits for the
    /// release request to finish so the next holder can start at once.
    pub async fn release(mut self) {
        if let Some(tx) = self.release.take() {
            let (done_tx, done_rx) = oneshot::channel();
            if tx.send(done_tx).is_ok() {
                let _ = tokio::time::timeout(Duration::from_secs(5), done_rx).await;
            }
        }
    }
}

/// The identity of this replica: POD_NAME from the downward API, else the
/// host name plus a random suffix (two processes on one host must differ).
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "modelservice-operator".into());
    format!("{host}-{}", random_suffix())
}

fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:08x}", h.finish() as u32)
}

/// The Lease namespace: the flag, else the pod's namespace, else "default".
pub fn lease_namespace(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "default".into())
}

/// Starts campaigning for the lease.
pub async fn start(
    client: Client,
    cfg: ElectionConfig,
    leadership: Leadership,
    metrics: Arc<Metrics>,
) -> Result<Election, kube_lease_manager::LeaseManagerError> {
    let manager = build_manager(&client, &cfg).await?;
    let (acquired_tx, acquired) = watch::channel(false);
    let (lost_tx, lost) = mpsc::channel(1);
    let (release_tx, release_rx) = oneshot::channel();
    info!(identity = %cfg.identity, namespace = %cfg.namespace, lease = LEASE_NAME, "campaigning for leadership");
    let freed = lease_freed(Api::namespaced(client.clone(), &cfg.namespace));
    tokio::spawn(campaign(
        Candidate {
            client: client.clone(),
            cfg: cfg.clone(),
            manager,
        },
        leadership,
        metrics,
        acquired_tx,
        lost_tx,
        release_rx,
        freed,
    ));
    Ok(Election {
        acquired,
        lost,
        release: Some(release_tx),
    })
}

/// A lease manager; building one reads the Lease afresh.
async fn build_manager(
    client: &Client,
    cfg: &ElectionConfig,
) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
    let secs = cfg.duration.as_secs().max(5);
    LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
        .with_namespace(cfg.namespace.clone())
        .with_identity(cfg.identity.clone())
        .with_duration(secs)
        .with_grace((secs / 3).max(2))
        .with_field_manager(lease_field_manager(&cfg.identity))
        .build()
        .await
}

/// A fresh manager, which reads the Lease: what notices a release before
/// the cached view expires.
async fn reread(candidate: &mut Candidate) {
    match build_manager(&candidate.client, &candidate.cfg).await {
        Ok(m) => candidate.manager = m,
        Err(e) => warn!(error = %e, "could not re-read the lease"),
    }
}

/// The field manager of one candidate's Lease writes: its own. Taking a
/// free Lease is a server-side apply without force, which must fail with a
/// conflict when another candidate has just taken it; two candidates that
/// share a field manager never conflict, so both would "win" a race for a
/// new Lease and lead at once until the first renewal (seen in CI: one
/// replica then exits as having lost the lease, and the other may be the
/// one that is stopped next).
fn lease_field_manager(identity: &str) -> String {
    let mut m = format!("{FIELD_MANAGER}-lease-{identity}");
    // The API server accepts field managers of at most 128 characters.
    m.truncate(128);
    m
}

/// What the campaign needs to rebuild its manager.
struct Candidate {
    client: Client,
    cfg: ElectionConfig,
    manager: LeaseManager,
}

/// A stream that yields whenever the Lease is seen without a holder. Its
/// watch backs off on errors: without that, a watch that keeps failing would
/// relist at once, over and over, and yield the freed Lease each time.
fn lease_freed(api: Api<Lease>) -> impl futures::Stream<Item = ()> + Send + Unpin {
    let config = watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}"));
    Box::pin(
        watcher::watcher(api, config)
            .default_backoff()
            .filter_map(|ev| async move {
                let freed = |l: Lease| {
                    l.spec
                        .and_then(|s| s.holder_identity)
                        .is_none_or(|h| h.is_empty())
                };
                match ev {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                        freed(l).then_some(())
                    }
                    Ok(watcher::Event::Delete(_)) => Some(()),
                    _ => None,
                }
            }),
    )
}

/// How long a standby that has just re-read a freed Lease waits before it
/// acts on another "freed" sighting. Each re-read rebuilds the lease manager
/// and so cancels the attempt to take the Lease under way: a burst of
/// sightings (a relisting watch, a release and a late renewal) must not
/// starve that attempt. A sighting within the window is acted on when it
/// ends, never dropped: it may be the release that matters.
const REREAD_QUIET: Duration = Duration::from_millis(500);

async fn campaign(
    mut candidate: Candidate,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    acquired: watch::Sender<bool>,
    lost: mpsc::Sender<()>,
    mut release: oneshot::Receiver<oneshot::Sender<()>>,
    mut freed: impl futures::Stream<Item = ()> + Send + Unpin,
) {
    let mut quiet_until = tokio::time::Instant::now();
    let mut deferred = false;
    loop {
        tokio::select! {
            biased;
            done = &mut release => {
                leadership.set(false);
                metrics.set_leader(false);
                match candidate.manager.release().await {
                    Ok(()) => info!("released the leader lease"),
                    Err(e) => warn!(error = %e, "could not release the leader lease; it expires by itself"),
                }
                if let Ok(done) = done {
                    let _ = done.send(());
                }
                return;
            }
            changed = candidate.manager.changed() => match changed {
                Ok(true) => {
                    info!("became the leader");
                    leadership.set(true);
                    metrics.set_leader(true);
                    let _ = acquired.send(true);
                }
                Ok(false) => {
                    let was_leader = leadership.is_leader();
                    leadership.set(false);
                    metrics.set_leader(false);
                    if was_leader {
                        warn!("lost the leader lease");
                        let _ = lost.send(()).await;
                        return;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "leader election request failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            // A standby re-checks at once when the lease is freed; the leader
            // ignores these (it is the one renewing). The crate's manager
            // trusts its cached view of the lease until it expires, so a
            // fresh one (which reads the Lease) is what notices the release.
            Some(()) = freed.next(), if !leadership.is_leader() => {
                if tokio::time::Instant::now() < quiet_until {
                    deferred = true;
                    continue;
                }
                reread(&mut candidate).await;
                quiet_until = tokio::time::Instant::now() + REREAD_QUIET;
            }
            () = tokio::time::sleep_until(quiet_until), if deferred && !leadership.is_leader() => {
                deferred = false;
                reread(&mut candidate).await;
                quiet_until = tokio::time::Instant::now() + REREAD_QUIET;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_candidate_writes_the_lease_as_its_own_field_manager() {
        assert_ne!(lease_field_manager("pod-a"), lease_field_manager("pod-b"));
        assert!(lease_field_manager(&"x".repeat(300)).len() <= 128);
    }
}
