//! Watch semantics: ordering, resume, 410 after restart, selectors,
//! bookmarks, timeouts, initial events and dropped streams.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::{cm, ours, rv_of, start, start_either};

type Events = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<WatchEvent<ConfigMap>, kube::Error>> + Send>,
>;

async fn watch(api: &Api<ConfigMap>, wp: &WatchParams, rv: &str) -> Events {
    api.watch(wp, rv).await.unwrap().boxed()
}

async fn next(events: &mut Events) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .expect("an event within 5s")
        .expect("no stream error")
        .expect("stream still open")
}

/// Next event that is not a bookmark, nor about a real cluster's root CA.
async fn next_change(events: &mut Events) -> WatchEvent<ConfigMap> {
    loop {
        match next(events).await {
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Added(c) | WatchEvent::Modified(c) | WatchEvent::Deleted(c)
                if !ours(&c) =>
            {
                continue;
            }
            e => return e,
        }
    }
}

fn name(e: &WatchEvent<ConfigMap>) -> (&'static str, String) {
    match e {
        WatchEvent::Added(o) => ("ADDED", o.metadata.name.clone().unwrap()),
        WatchEvent::Modified(o) => ("MODIFIED", o.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(o) => ("DELETED", o.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(b) => ("BOOKMARK", b.metadata.resource_version.clone()),
        WatchEvent::Error(s) => ("ERROR", s.reason.clone()),
    }
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_in_order() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PostParams::default();
    let a = api.create(&pp, &cm("a", &[])).await.unwrap();
    api.create(&pp, &cm("b", &[])).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    api.delete("b", &Default::default()).await.unwrap();

    let mut ev = watch(
        &api,
        &WatchParams::default(),
        &rv_of(&a.metadata).to_string(),
    )
    .await;
    assert_eq!(name(&next_change(&mut ev).await), ("ADDED", "b".into()));
    assert_eq!(name(&next_change(&mut ev).await), ("MODIFIED", "a".into()));
    assert_eq!(name(&next_change(&mut ev).await), ("DELETED", "b".into()));
    // Then live events.
    api.create(&pp, &cm("c", &[])).await.unwrap();
    assert_eq!(name(&next_change(&mut ev).await), ("ADDED", "c".into()));
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_current_state() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let mut ev = watch(&api, &WatchParams::default(), "0").await;
    assert_eq!(name(&next_change(&mut ev).await), ("ADDED", "a".into()));
    api.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    assert_eq!(name(&next_change(&mut ev).await), ("ADDED", "b".into()));
}

#[tokio::test]
async fn send_initial_events_ends_with_annotated_bookmark() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let mut ev = watch(&api, &WatchParams::streaming_lists(), "").await;
    assert_eq!(name(&next_change(&mut ev).await), ("ADDED", "a".into()));
    let mut after = next(&mut ev).await;
    while matches!(&after, WatchEvent::Added(c) if !ours(c)) {
        after = next(&mut ev).await;
    }
    match after {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.annotations["k8s.io/initial-events-end"], "true")
        }
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
}

// Fake-only: it restarts the fake; the real restart is in the operator's `outage::` scenarios.
#[tokio::test]
async fn old_resource_version_after_restart_is_410_expired() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let a = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    let old_rv = rv_of(&a.metadata).to_string();

    let mut before = watch(&api, &WatchParams::default(), &old_rv).await;
    assert_eq!(name(&next_change(&mut before).await), ("ADDED", "b".into()));
    server.restart();
    let end = tokio::time::timeout(Duration::from_secs(5), before.try_next())
        .await
        .unwrap();
    assert!(
        matches!(end, Ok(None)),
        "restart ends open watches: {end:?}"
    );

    let mut after = watch(&api, &WatchParams::default(), &old_rv).await;
    match next(&mut after).await {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert!(
                s.message.starts_with("too old resource version"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // Objects survived; watching from the current version works.
    let list = api.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    let rv = list.metadata.resource_version.unwrap();
    let mut fresh = watch(&api, &WatchParams::default(), &rv).await;
    api.create(&PostParams::default(), &cm("c", &[]))
        .await
        .unwrap();
    assert_eq!(name(&next_change(&mut fresh).await), ("ADDED", "c".into()));
}

#[tokio::test]
async fn label_selector_watch_sees_objects_leave_and_enter() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PatchParams::default();
    let mut a = cm("a", &[]);
    a.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    api.create(&PostParams::default(), &a).await.unwrap();
    api.create(&PostParams::default(), &cm("other", &[]))
        .await
        .unwrap();

    let mut ev = watch(&api, &WatchParams::default().labels("app=web"), "").await;
    assert_eq!(name(&next_change(&mut ev).await), ("ADDED", "a".into()));
    api.patch(
        "a",
        &pp,
        &Patch::Merge(&json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    match next_change(&mut ev).await {
        WatchEvent::Deleted(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("a"));
            // The last matching state, at the new resourceVersion.
            assert_eq!(o.metadata.labels.unwrap()["app"], "web");
        }
        other => panic!("expected DELETED, got {other:?}"),
    }
    api.patch("other", &pp, &Patch::Merge(&json!({"data": {"x": "1"}})))
        .await
        .unwrap();
    api.patch(
        "a",
        &pp,
        &Patch::Merge(&json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    assert_eq!(
        name(&next_change(&mut ev).await),
        ("ADDED", "a".into()),
        "non-matching changes are filtered"
    );
    api.patch("a", &pp, &Patch::Merge(&json!({"data": {"y": "2"}})))
        .await
        .unwrap();
    assert_eq!(name(&next_change(&mut ev).await), ("MODIFIED", "a".into()));
}

#[tokio::test]
async fn field_selector_watch() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut ev = watch(&api, &WatchParams::default().fields("metadata.name=b"), "").await;
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    assert_eq!(name(&next_change(&mut ev).await), ("ADDED", "b".into()));
}

// Fake-only: it sets the fake's bookmark interval (a real server sends about one a minute).
#[tokio::test]
async fn bookmarks_carry_the_current_resource_version() {
    let server = fake_apiserver::FakeApiServer::builder()
        .bookmark_interval(Duration::from_millis(100))
        .start()
        .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut ev = watch(&api, &WatchParams::default().labels("none=here"), "").await;
    let c = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    loop {
        match next(&mut ev).await {
            WatchEvent::Bookmark(b) => {
                let rv: u64 = b.metadata.resource_version.parse().unwrap();
                if rv >= rv_of(&c.metadata) {
                    assert_eq!(b.types.kind, "ConfigMap");
                    break;
                }
            }
            other => panic!("only bookmarks expected, got {other:?}"),
        }
    }
    // Without allowWatchBookmarks there are none.
    let mut quiet = watch(
        &api,
        &WatchParams::default().disable_bookmarks(),
        &server.resource_version().to_string(),
    )
    .await;
    let r = tokio::time::timeout(Duration::from_millis(400), quiet.try_next()).await;
    assert!(r.is_err(), "no events at all: {r:?}");
}

#[tokio::test]
async fn watch_closes_after_timeout_seconds() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut ev = watch(
        &api,
        &WatchParams::default().timeout(1).disable_bookmarks(),
        "",
    )
    .await;
    let end = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match ev.try_next().await {
                Ok(Some(WatchEvent::Added(c))) if !ours(&c) => continue,
                other => return other,
            }
        }
    })
    .await
    .unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
}

// Fake-only: dropping every watch is a fault the fake injects.
#[tokio::test]
async fn drop_watches_ends_streams() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut ev = watch(&api, &WatchParams::default(), "").await;
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let a = next_change(&mut ev).await;
    server.drop_watches();
    let end = tokio::time::timeout(Duration::from_secs(5), ev.try_next())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
    // Re-watching from the last seen version loses nothing.
    let WatchEvent::Added(a) = a else { panic!() };
    api.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    let mut again = watch(
        &api,
        &WatchParams::default(),
        &rv_of(&a.metadata).to_string(),
    )
    .await;
    assert_eq!(name(&next_change(&mut again).await), ("ADDED", "b".into()));
}
