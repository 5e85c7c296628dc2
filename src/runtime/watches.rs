//! How the operator watches the API server, and how it gets back after an
//! outage (an apiserver or etcd restart, a dropped connection, a compacted
//! history).
//!
//! Each watch has its own backoff, and nothing else does. kube-runtime's
//! `Controller` also puts one exponential backoff around the merged stream
//! of all its triggers. Together with a backoff on each watch, that meant one
//! failing child watch stopped every trigger, the ModelService watch
//! included, for a delay that grew with every error from any watch (25 s
//! and more after a single apiserver restart). New and changed ModelServices
//! were then not reconciled at all while the child watches kept failing.
//! So the Controller's trigger backoff is [`NoTriggerBackoff`], and each
//! watch backs off on its own, briefly: a reconnect attempt is one cheap
//! request, and the delay bounds how long after the server is back the
//! operator stays blind.
//!
//! A 410 Gone (history compacted, or the watch cache of a restarted server
//! starting after our resourceVersion) means the server is up and wants a
//! fresh list; kube's watcher relists by itself, so that error skips the
//! backoff entirely. Every other watch error is logged at warn, with the
//! resource it concerns, and counted in `modelservice_watch_errors_total`.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, ExponentialBackoff};
use kube::runtime::{WatchStreamExt, reflector};

use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::controller::freshness::Freshness;
use crate::controller::pods::{PodView, PodWriter, ProblemMemory};
use crate::core::labels::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::metrics::Metrics;

/// First retry after a watch error, before jitter.
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// Longest wait between retries before jitter, which adds up to as much
/// again: at most 4 s blind after an outage ends.
const LONGEST_RETRY: Duration = Duration::from_secs(2);

/// The retry delays of one watch: 200 ms doubling to 2 s, plus up to as much
/// again in jitter, so that many watches (and many operators) do not
/// reconnect in lockstep. kube's `StreamBackoff` resets it on any event.
/// (kube's own default, 800 ms doubling to 30 s, can leave a watch blind for
/// half a minute after a three-second outage.)
pub fn watch_backoff() -> impl Backoff {
    ExponentialBackoff::from(
        backon::ExponentialBuilder::default()
            .with_min_delay(FIRST_RETRY)
            .with_max_delay(LONGEST_RETRY)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
}

/// The Controller's backoff around all its triggers at once: none, because
/// every watch already backs off on its own (see the module doc).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTriggerBackoff;

impl Iterator for NoTriggerBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoTriggerBackoff {
    fn reset(&mut self) {}
}

/// True for the one watch error that is not a failure: the server asks for a
/// relist (410 Gone), which kube's watcher starts by itself.
pub fn is_relist(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchError(status) if status.code == 410)
}

/// Reports a watch's errors (warn and a counter, by resource) and drops the
/// 410s, so that only real failures reach the backoff.
pub fn reported<S, K>(
    stream: S,
    resource: Arc<str>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    S: Stream<Item = Result<K, watcher::Error>> + Send,
    K: Send,
{
    stream.filter(move |item| {
        let keep = match item {
            Ok(_) => true,
            Err(e) if is_relist(e) => {
                info!(resource = &*resource, error = %e, "watch expired; relisting");
                metrics.watch_error(&resource, "expired");
                false
            }
            Err(e) => {
                warn!(resource = &*resource, error = %e, "watch failed; retrying");
                metrics.watch_error(&resource, error_kind(e));
                true
            }
        };
        futures::future::ready(keep)
    })
}

/// The `kind` label of a watch error.
fn error_kind(e: &watcher::Error) -> &'static str {
    match e {
        watcher::Error::InitialListFailed(_) => "list",
        watcher::Error::WatchStartFailed(_) => "watch_start",
        watcher::Error::WatchError(_) => "watch_event",
        watcher::Error::WatchFailed(_) => "watch_stream",
        watcher::Error::NoResourceVersion => "no_resource_version",
    }
}

/// What a reflector-backed watch needs of its objects.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A watch of `api` with `config`, reported, backed off, trimmed by `modify`
/// and reflected into `writer` (see `reflect`), whose progress it notes in `fresh` once the
/// cache holds each event.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    fresh: Arc<Freshness>,
    metrics: Arc<Metrics>,
    modify: impl FnMut(&mut K) + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Watched,
{
    let resource: Arc<str> = K::plural(&()).into();
    let events = reported(watcher::watcher(api, config), resource, metrics)
        .backoff(watch_backoff())
        .modify(modify);
    super::reflect::reflect(events, writer).inspect(move |event| {
        if let Ok(event) = event {
            fresh.observe(event);
        }
    })
}

/// The watch of everything the operator labelled, listed `page` objects at
/// a time.
fn ours(page: u32) -> watcher::Config {
    watcher::Config::default()
        .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"))
        .page_size(page)
}

/// A child watch: only the objects the operator labelled.
pub fn child_watch<K>(
    api: Api<K>,
    page: u32,
    writer: reflector::store::Writer<K>,
    fresh: Arc<Freshness>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Watched,
{
    let config = ours(page);
    watch(api, config, writer, fresh, metrics, |_| {}).touched_objects()
}

/// The pods of every ModelService (our `managed-by` label), into their
/// cache; yields a pod only when what diagnosis says about it changed (see
/// `controller::pods`), so that a healthy rollout starts no reconcile here.
pub fn pod_watch(
    api: Api<PodView>,
    page: u32,
    writer: PodWriter,
    fresh: Arc<Freshness>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<PodView, watcher::Error>> + Send {
    let config = ours(page);
    let mut problems = ProblemMemory::default();
    let PodWriter { writer, index } = writer;
    watch(api, config, writer, fresh, metrics, |_| {})
        .inspect(move |event| {
            if let Ok(event) = event {
                index.apply(event);
            }
        })
        .filter_map(move |event| {
            futures::future::ready(match event {
                Ok(event) => problems.changed(event).map(Ok),
                Err(e) => Some(Err(e)),
            })
        })
}

/// Whether a watch failed because its kind is not served (a 404: the CRD
/// was deleted).
pub fn is_gone(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => matches!(k, kube::Error::Api(s) if s.code == 404),
        watcher::Error::WatchError(s) => s.code == 404,
        watcher::Error::NoResourceVersion => false,
    }
}

/// A child watch that runs only while `available` holds: started when the
/// API appears, dropped when it goes, started again (with a fresh list, so
/// the cache forgets what vanished meanwhile) when it comes back. Without
/// the API this costs nothing: no request is made until discovery finds it.
/// A 404 from the watch itself calls `gone`, which ends the run at once
/// rather than at the next discovery.
pub fn gated_child_watch<K>(
    api: Api<K>,
    page: u32,
    available: tokio::sync::watch::Receiver<bool>,
    gone: impl Fn() + Clone + Send + Sync + 'static,
    writer: reflector::store::Writer<K>,
    fresh: Arc<Freshness>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Watched,
{
    let resource: Arc<str> = K::plural(&()).into();
    let config = ours(page);
    let runs = futures::stream::unfold(available, move |mut available| {
        let (api, config, resource, metrics, on_gone) = (
            api.clone(),
            config.clone(),
            resource.clone(),
            metrics.clone(),
            gone.clone(),
        );
        async move {
            // Until the API is served (an error: the sender is gone, stop).
            available.wait_for(|served| *served).await.ok()?;
            let mut ended = available.clone();
            let watched = watcher::watcher(api, config).inspect(move |event| {
                if let Err(e) = event
                    && is_gone(e)
                {
                    on_gone();
                }
            });
            let run = reported(watched, resource, metrics)
                .backoff(watch_backoff())
                .take_until(async move {
                    let _ = ended.wait_for(|served| !*served).await;
                });
            Some((run, available))
        }
    })
    .flatten();
    super::reflect::reflect(runs, writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                fresh.observe(event);
            }
        })
        .touched_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16) -> watcher::Error {
        watcher::Error::WatchError(Box::new(Status::failure("x", "y").with_code(code)))
    }

    #[test]
    fn a_404_in_any_phase_of_a_watch_means_the_kind_is_gone() {
        let api = |code: u16| kube::Error::Api(Box::new(Status::failure("x", "y").with_code(code)));
        assert!(is_gone(&status(404)));
        assert!(is_gone(&watcher::Error::InitialListFailed(api(404))));
        assert!(is_gone(&watcher::Error::WatchStartFailed(api(404))));
        assert!(!is_gone(&watcher::Error::InitialListFailed(api(403))));
        assert!(!is_gone(&status(410)));
        assert!(!is_gone(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn only_a_410_is_a_relist() {
        assert!(is_relist(&status(410)));
        assert!(!is_relist(&status(500)));
        assert!(!is_relist(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn the_trigger_backoff_never_waits() {
        let mut b = NoTriggerBackoff;
        assert!((0..100).all(|_| b.next() == Some(Duration::ZERO)));
    }

    #[test]
    fn a_watch_retries_within_seconds_however_long_the_outage() {
        let mut b = watch_backoff();
        let delays: Vec<Duration> = (0..50).map(|_| b.next().unwrap_or_default()).collect();
        assert!(delays.iter().all(|d| *d <= LONGEST_RETRY * 2), "{delays:?}");
        assert!(
            delays[10..].iter().all(|d| *d >= LONGEST_RETRY),
            "{delays:?}"
        );
        assert!(delays[0] <= FIRST_RETRY * 2, "{delays:?}");
        b.reset();
        assert!(b.next().unwrap_or_default() <= FIRST_RETRY * 2);
    }

    #[tokio::test]
    async fn a_410_is_dropped_and_counted_other_errors_pass() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let items: Vec<Result<u8, watcher::Error>> =
            vec![Ok(1), Err(status(410)), Err(status(500)), Ok(2)];
        let out: Vec<_> = reported(
            futures::stream::iter(items),
            "things".into(),
            metrics.clone(),
        )
        .collect()
        .await;
        assert_eq!(out.len(), 3);
        assert!(matches!(out[1], Err(ref e) if !is_relist(e)));
        let text = metrics.render();
        assert!(
            text.contains(r#"modelservice_watch_errors_total{kind="expired",resource="things"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"modelservice_watch_errors_total{kind="watch_event",resource="things"} 1"#
            ),
            "{text}"
        );
    }
}
