//! Deletion with finalizers, and kube-runtime's finalizer helper.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use serde_json::json;

use crate::{cm, ms, ms_api, ns, start_either, status_of};

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut o = cm("a", &[]);
    o.metadata.finalizers = Some(vec!["example.com/f".into()]);
    let created = api.create(&PostParams::default(), &o).await.unwrap();
    let mut events = api
        .watch(
            // Only this object: a real namespace gets its kube-root-ca.crt
            // ConfigMap at about this moment.
            &WatchParams::default()
                .disable_bookmarks()
                .fields("metadata.name=a"),
            created.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap()
        .boxed();

    let r = api.delete("a", &DeleteParams::default()).await.unwrap();
    let held = r.left().expect("the object, still present");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(held.metadata.deletion_grace_period_seconds, Some(0));
    assert!(api.get("a").await.is_ok());
    assert!(matches!(
        events.try_next().await.unwrap(),
        Some(WatchEvent::Modified(_))
    ));

    // Deleting again changes nothing.
    let again = api
        .delete("a", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        held.metadata.resource_version
    );

    // New finalizers are refused once deleting; other changes are fine.
    let s = status_of(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": ["example.com/f", "example.com/g"]}})),
        )
        .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(
        s.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        s.message
    );
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"still": "writable"}})),
    )
    .await
    .unwrap();
    assert!(matches!(
        events.try_next().await.unwrap(),
        Some(WatchEvent::Modified(_))
    ));

    // Emptying the finalizers removes the object: one DELETED event.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(matches!(
        events.try_next().await.unwrap(),
        Some(WatchEvent::Deleted(_))
    ));
    assert_eq!(status_of(api.get("a").await).code, 404);
}

#[tokio::test]
async fn kube_runtime_finalizer_helper_works() {
    let (_backend, client) = start_either().await;
    let api = ms_api(&client, ns(&client));
    api.create(&PostParams::default(), &ms("m", json!({})))
        .await
        .unwrap();
    let name = "serving.modelservice.dev/cleanup";

    let run = |api: kube::Api<kube::api::DynamicObject>| async move {
        let obj = std::sync::Arc::new(api.get("m").await.unwrap());
        finalizer(&api, name, obj, |ev| async move {
            Ok::<_, std::convert::Infallible>(match ev {
                Event::Apply(_) | Event::Cleanup(_) => Action::await_change(),
            })
        })
        .await
    };
    run(api.clone())
        .await
        .expect("adds the finalizer (JSON patch with test null)");
    assert_eq!(
        api.get("m").await.unwrap().metadata.finalizers.unwrap(),
        [name]
    );

    api.delete("m", &DeleteParams::default()).await.unwrap();
    run(api.clone())
        .await
        .expect("cleanup removes the finalizer (test + remove)");
    let gone = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            if api.get_opt("m").await.unwrap().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "object removed once its last finalizer went");
}
