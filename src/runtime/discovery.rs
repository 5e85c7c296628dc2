//! Finding the optional APIs (KEDA, later Gateway API) a cluster may lack.
//!
//! Such an API is another project's CRD: installed after the operator,
//! removed, or never there. The operator asks the API server's discovery for
//! its group version at startup and again every `--discovery-interval`, one
//! small GET per optional kind. A missing API is never an error here: the
//! ModelServices that need it say so in their status, and when it appears
//! they are reconciled again (the returned stream fires).

use std::time::Duration;

use futures::Stream;
use kube::{Client, Resource};
use tracing::{info, warn};

use crate::controller::Stores;
use crate::controller::children::{Child, ForEachChild, each_child};

/// Whether the API server serves the resource of row `C` now; `None` when
/// discovery itself failed (the API server is down): then nothing changes.
async fn served<C: Child>(client: &Client) -> Option<bool> {
    let group_version = C::Object::api_version(&());
    let plural = C::Object::plural(&());
    match client.list_api_group_resources(&group_version).await {
        Ok(list) => Some(list.resources.iter().any(|r| r.name == plural)),
        Err(kube::Error::Api(e)) if e.code == 404 => Some(false),
        Err(e) => {
            warn!(api = %group_version, error = %e, "discovery failed; keeping what was known");
            None
        }
    }
}

/// Looks for every optional API of the child table once; true when one of
/// them appeared.
pub async fn discover(client: &Client, stores: &Stores) -> bool {
    struct Optional<'a>(
        Vec<futures::future::BoxFuture<'a, bool>>,
        &'a Client,
        &'a Stores,
    );
    impl<'a> ForEachChild for Optional<'a> {
        fn visit<C: Child>(&mut self) {
            if !C::OPTIONAL {
                return;
            }
            let (client, stores) = (self.1, self.2);
            self.0.push(Box::pin(async move {
                let Some(now) = served::<C>(client).await else {
                    return false;
                };
                let changed = C::cache(stores).set_available(now);
                if changed {
                    info!(
                        api = %C::Object::api_version(&()),
                        kind = %C::Object::kind(&()),
                        served = now,
                        "optional API {}",
                        if now { "found" } else { "gone" }
                    );
                }
                changed && now
            }));
        }
    }
    let mut optional = Optional(Vec::new(), client, stores);
    each_child(&mut optional);
    futures::future::join_all(optional.0)
        .await
        .into_iter()
        .any(|appeared| appeared)
}

/// The first look, before the controller starts: so that no ModelService
/// is reported without an API the cluster has.
pub async fn initial(client: &Client, stores: &Stores) {
    discover(client, stores).await;
}

/// Yields each time an optional API goes, whoever found it gone (discovery,
/// or a 404 from an apply or a watch: see `Cache::refute`), so that the
/// ModelServices that use it say so in status now, not at their next
/// resync: a CRD deleted under a model otherwise read as healthy.
pub fn gone(stores: &Stores) -> impl Stream<Item = ()> + Send + use<> {
    struct Receivers<'a>(Vec<tokio::sync::watch::Receiver<bool>>, &'a Stores);
    impl ForEachChild for Receivers<'_> {
        fn visit<C: Child>(&mut self) {
            if C::OPTIONAL {
                self.0.push(C::cache(self.1).availability());
            }
        }
    }
    let mut receivers = Receivers(Vec::new(), stores);
    each_child(&mut receivers);
    futures::stream::select_all(receivers.0.into_iter().map(|rx| {
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                rx.changed().await.ok()?;
                if !*rx.borrow_and_update() {
                    return Some(((), rx));
                }
            }
        }))
    }))
}

/// Looks again every `interval`; yields each time an API appeared, so that
/// the ModelServices waiting for it are reconciled.
pub fn run(client: Client, stores: Stores, interval: Duration) -> impl Stream<Item = ()> + Send {
    futures::stream::unfold((client, stores), move |(client, stores)| async move {
        loop {
            tokio::time::sleep(interval).await;
            if discover(&client, &stores).await {
                return Some(((), (client, stores)));
            }
        }
    })
}
