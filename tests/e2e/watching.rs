//! Watches that scenarios run beside the operator, to see states a poll
//! could miss.

use std::fmt::Debug;

use futures::Stream;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// `watcher` with kube's default backoff after an error. Without it a
/// failing watch is retried at once; the in-process client fails without
/// ever waiting, so such a stream is always ready and the task reading it
/// never yields: it cannot be aborted, and the test runtime's shutdown waits
/// for it forever (a scenario that ended with its fake API server gone hung
/// CI until its 90-minute limit).
pub fn events<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config).default_backoff()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fake_apiserver::FakeApiServer;
    use futures::StreamExt;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::Api;
    use kube::runtime::watcher;

    use super::events;
    use crate::observe::needs_fake;

    /// A watch whose client can no longer reach the API server (the
    /// client's own worker task ended with the runtime that ran it, as at
    /// the end of a scenario) fails at once, every time: read without a
    /// backoff its task never yields, and cannot be aborted. It runs on a
    /// runtime of its own (two workers: the one left drives the timers),
    /// shut down without waiting, so that such a task fails this test
    /// rather than hanging it.
    #[test]
    fn a_watch_that_fails_at_once_can_still_be_aborted() {
        if !needs_fake("a_watch_that_fails_at_once_can_still_be_aborted") {
            return;
        }
        let runtime = || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime")
        };
        let gone = runtime();
        let client = gone.block_on(async { FakeApiServer::start().await.client() });
        gone.shutdown_background();

        let rt = runtime();
        let stopped = rt.block_on(async {
            let api = Api::<Deployment>::namespaced(client, "default");
            let reader = tokio::spawn(async move {
                let mut events = std::pin::pin!(events(api, watcher::Config::default()));
                while events.next().await.is_some() {}
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            reader.abort();
            tokio::time::timeout(Duration::from_secs(5), reader)
                .await
                .is_ok()
        });
        rt.shutdown_background();
        assert!(stopped, "the aborted watch task never stopped");
    }
}
