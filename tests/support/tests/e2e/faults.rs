//! Fault injection, pause/resume and request counters.
//!
//! Fake-only: fault injection, pause/resume and request counters exist only in the fake.

use std::time::Duration;

use fake_apiserver::{FailRule, Verb};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::{cm, ms_api, start, status_of};

#[tokio::test]
async fn fail_next_injects_500_and_409() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();

    server.fail_next(
        FailRule::new(500)
            .verb(Verb::Get)
            .resource("configmaps")
            .times(2),
    );
    for _ in 0..2 {
        let s = status_of(api.get("a").await);
        assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
    }
    api.get("a").await.expect("rule used up");

    server.fail_next(FailRule {
        verb: Some(Verb::Patch),
        resource: Some("configmaps".into()),
        code: 409,
        times: 1,
    });
    // Other verbs and resources are unaffected.
    ms_api(&client, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    let s = status_of(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"k": "v"}})),
        )
        .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert!(s.message.ends_with("the object has been modified; please apply your changes to the latest version and try again"));
    assert!(
        api.get("a")
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .is_empty(),
        "the failed patch was not applied"
    );
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();

    server.fail_next(FailRule::new(500).resource("modelservices/status"));
    let s = status_of(
        ms_api(&client, "default")
            .patch_status("x", &PatchParams::default(), &Patch::Merge(&json!({})))
            .await,
    );
    assert_eq!(s.code, 500, "subresource rules match the subresource");
}

#[tokio::test]
async fn pause_holds_requests_and_watch_delivery() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut events = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();

    server.pause();
    let writer = {
        let api = api.clone();
        tokio::spawn(async move { api.create(&PostParams::default(), &cm("a", &[])).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "requests wait while paused");
    assert!(
        server
            .get_object("", "configmaps", "default", "a")
            .is_none()
    );

    server.resume();
    writer.await.unwrap().unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ev, Some(WatchEvent::Added(_))));

    // A paused server also stops delivering on open watches.
    server.pause();
    server
        .get_object("", "configmaps", "default", "a")
        .expect("stored");
    let direct = {
        let api = api.clone();
        tokio::spawn(async move {
            api.patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(&json!({"data": {"x": "1"}})),
            )
            .await
        })
    };
    let r = tokio::time::timeout(Duration::from_millis(200), events.try_next()).await;
    assert!(r.is_err(), "no delivery while paused");
    server.resume();
    direct.await.unwrap().unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ev, Some(WatchEvent::Modified(_))));
}

#[tokio::test]
async fn counters_count_by_verb_and_resource() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    server.reset_counts();
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    api.get("a").await.unwrap();
    api.get("a").await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    let _ = api.get("missing").await;
    ms_api(&client, "default")
        .patch_status("m", &PatchParams::default(), &Patch::Merge(&json!({})))
        .await
        .unwrap_err();
    let _w = api.watch(&WatchParams::default(), "0").await.unwrap();

    let c = server.counts();
    assert_eq!(c.get(Verb::Create, "configmaps"), 1);
    assert_eq!(c.get(Verb::Get, "configmaps"), 3);
    assert_eq!(c.get(Verb::List, "configmaps"), 1);
    assert_eq!(c.get(Verb::Watch, "configmaps"), 1);
    assert_eq!(c.get(Verb::Patch, "configmaps"), 1);
    assert_eq!(c.get(Verb::Patch, "modelservices/status"), 1);
    assert_eq!(c.writes(), 3);
    assert_eq!(c.writes_excluding(&["modelservices"]), 2);
    assert_eq!(c.total(), 8);
    assert_eq!(c.iter().count(), 6);
    server.reset_counts();
    assert_eq!(server.counts().total(), 0);
}
