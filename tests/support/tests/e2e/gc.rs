//! Garbage collection of dependents, namespace deletion, propagation policies.
//!
//! Fake-only: the fake's own garbage collector (a real cluster's is kube-controller-manager's, exercised by the operator's e2e deletion scenarios).

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::{cm, eventually, ms, ms_api};

fn owned_by(name: &str, owners: &[(&str, &str)]) -> ConfigMap {
    let mut o = cm(name, &[]);
    o.metadata.owner_references = Some(
        owners
            .iter()
            .map(|(n, uid)| OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: n.to_string(),
                uid: uid.to_string(),
                ..Default::default()
            })
            .collect(),
    );
    o
}

async fn gone(api: &Api<ConfigMap>, name: &str) {
    eventually(&format!("{name} to be collected"), || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await
}

async fn setup() -> (fake_apiserver::FakeApiServer, Client, Api<ConfigMap>) {
    let (server, client) = crate::start().await;
    let api = Api::default_namespaced(client.clone());
    (server, client, api)
}

#[tokio::test]
async fn dependents_are_collected_in_chains() {
    let (_server, client, api) = setup().await;
    let pp = PostParams::default();
    let root = ms_api(&client, "default")
        .create(&pp, &ms("root", json!({})))
        .await
        .unwrap();
    let mut child = owned_by("child", &[("root", root.metadata.uid.as_deref().unwrap())]);
    child.metadata.owner_references.as_mut().unwrap()[0].kind = "ModelService".into();
    let child = api.create(&pp, &child).await.unwrap();
    let grandchild = api
        .create(
            &pp,
            &owned_by(
                "grandchild",
                &[("child", child.metadata.uid.as_deref().unwrap())],
            ),
        )
        .await
        .unwrap();
    let mut held = owned_by(
        "held",
        &[("grandchild", grandchild.metadata.uid.as_deref().unwrap())],
    );
    held.metadata.finalizers = Some(vec!["example.com/f".into()]);
    api.create(&pp, &held).await.unwrap();
    api.create(&pp, &cm("unrelated", &[])).await.unwrap();

    let started = std::time::Instant::now();
    ms_api(&client, "default")
        .delete("root", &DeleteParams::default())
        .await
        .unwrap();
    gone(&api, "child").await;
    gone(&api, "grandchild").await;
    assert!(started.elapsed() < Duration::from_secs(2));
    // A dependent with finalizers is only marked for deletion.
    let held = eventually("held to be terminating", || async {
        api.get("held")
            .await
            .ok()
            .filter(|o| o.metadata.deletion_timestamp.is_some())
    })
    .await;
    assert_eq!(held.metadata.finalizers.unwrap(), ["example.com/f"]);
    assert!(api.get_opt("unrelated").await.unwrap().is_some());
}

#[tokio::test]
async fn objects_created_with_a_missing_owner_are_collected() {
    let (_server, _client, api) = setup().await;
    api.create(
        &PostParams::default(),
        &owned_by(
            "orphan",
            &[("ghost", "00000000-0000-4000-8000-000000000000")],
        ),
    )
    .await
    .unwrap();
    gone(&api, "orphan").await;
}

#[tokio::test]
async fn objects_with_a_surviving_owner_stay() {
    let (_server, _client, api) = setup().await;
    let pp = PostParams::default();
    let a = api.create(&pp, &cm("a", &[])).await.unwrap();
    let b = api.create(&pp, &cm("b", &[])).await.unwrap();
    let (ua, ub) = (a.metadata.uid.unwrap(), b.metadata.uid.unwrap());
    api.create(&pp, &owned_by("both", &[("a", &ua), ("b", &ub)]))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    // The dangling reference is dropped, the object stays.
    let o = eventually("dangling owner reference to be removed", || async {
        let o = api.get("both").await.unwrap();
        (o.metadata.owner_references.as_ref().unwrap().len() == 1).then_some(o)
    })
    .await;
    assert_eq!(o.metadata.owner_references.unwrap()[0].uid, ub);
}

#[tokio::test]
async fn orphan_and_foreground_propagation() {
    let (_server, _client, api) = setup().await;
    let pp = PostParams::default();
    let a = api.create(&pp, &cm("a", &[])).await.unwrap();
    api.create(
        &pp,
        &owned_by("kept", &[("a", a.metadata.uid.as_deref().unwrap())]),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::orphan()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let kept = api.get("kept").await.unwrap();
    assert!(kept.metadata.owner_references.is_none());

    let b = api.create(&pp, &cm("b", &[])).await.unwrap();
    let mut blocker = owned_by("blocker", &[("b", b.metadata.uid.as_deref().unwrap())]);
    blocker.metadata.finalizers = Some(vec!["example.com/f".into()]);
    api.create(&pp, &blocker).await.unwrap();
    let r = api.delete("b", &DeleteParams::foreground()).await.unwrap();
    let owner = r.left().expect("foreground delete keeps the owner for now");
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("blocker to be terminating", || async {
        api.get("blocker")
            .await
            .ok()
            .and_then(|o| o.metadata.deletion_timestamp)
    })
    .await;
    assert!(
        api.get_opt("b").await.unwrap().is_some(),
        "owner waits for its dependent"
    );
    let patch = json!({"metadata": {"finalizers": null}});
    api.patch(
        "blocker",
        &Default::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    gone(&api, "blocker").await;
    gone(&api, "b").await;
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_content() {
    let (_server, client, _api) = setup().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("tmp".into());
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    let r = nss.delete("tmp", &DeleteParams::default()).await.unwrap();
    let terminating = r.left().expect("namespace object returned");
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    eventually("namespace to be gone", || async {
        nss.get_opt("tmp").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // default may not be deleted.
    let s = crate::status_of(nss.delete("default", &DeleteParams::default()).await);
    assert_eq!(s.code, 403);
}

#[tokio::test]
async fn many_dependents_are_collected_promptly() {
    let (_server, client, api) = setup().await;
    let owner = ms_api(&client, "default")
        .create(&PostParams::default(), &ms("big", json!({})))
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    for i in 0..300 {
        api.create(
            &PostParams::default(),
            &owned_by(&format!("d{i}"), &[("big", &uid)]),
        )
        .await
        .unwrap();
    }
    ms_api(&client, "default")
        .delete("big", &DeleteParams::default())
        .await
        .unwrap();
    eventually("all dependents collected", || async {
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}
