//! Garbage collection of dependents, namespace deletion, propagation policies.
//!
//! On a real cluster the collector is kube-controller-manager's, so these
//! wait for collection ("eventually") instead of expecting it at once, and
//! say what a real collector needs: owner references with the owner's own
//! kind and apiVersion, and `blockOwnerDeletion` where a foreground deletion
//! must wait.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::{cm, eventually, ms, ms_api, ns, ours};

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

/// How long collection may take. A real collector learns of a newly
/// installed CRD (the ModelService owners here) at its next discovery
/// resync, every 30 s; until then it cannot look such an owner up.
const COLLECTED: Duration = Duration::from_secs(60);

async fn gone(api: &Api<ConfigMap>, name: &str) {
    crate::eventually_within(COLLECTED, &format!("{name} to be collected"), || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await
}

async fn setup() -> (crate::Backend, Client, Api<ConfigMap>) {
    let (backend, client) = crate::start_either().await;
    let api = Api::default_namespaced(client.clone());
    (backend, client, api)
}

/// An owner reference to the ModelService `name` with `uid`.
fn to_modelservice(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "serving.modelservice.dev/v1".into(),
        kind: "ModelService".into(),
        name: name.into(),
        uid: uid.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn dependents_are_collected_in_chains() {
    let (_server, client, api) = setup().await;
    let pp = PostParams::default();
    let root = ms_api(&client, ns(&client))
        .create(&pp, &ms("root", json!({})))
        .await
        .unwrap();
    let mut child = cm("child", &[]);
    child.metadata.owner_references = Some(vec![to_modelservice(
        "root",
        root.metadata.uid.as_deref().unwrap(),
    )]);
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

    ms_api(&client, ns(&client))
        .delete("root", &DeleteParams::default())
        .await
        .unwrap();
    gone(&api, "child").await;
    gone(&api, "grandchild").await;
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
    eventually("kept to be orphaned", || async {
        let kept = api.get("kept").await.ok()?;
        kept.metadata.owner_references.is_none().then_some(())
    })
    .await;

    let b = api.create(&pp, &cm("b", &[])).await.unwrap();
    let mut blocker = owned_by("blocker", &[("b", b.metadata.uid.as_deref().unwrap())]);
    // A foreground deletion waits only for dependents that block it.
    blocker.metadata.owner_references.as_mut().unwrap()[0].block_owner_deletion = Some(true);
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
    let tmp = format!("{}-tmp", ns(&client));
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(tmp.clone());
    nss.create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &tmp);
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    let r = nss.delete(&tmp, &DeleteParams::default()).await.unwrap();
    let terminating = r.left().expect("namespace object returned");
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    crate::eventually_within(Duration::from_secs(30), "namespace to be gone", || async {
        nss.get_opt(&tmp).await.unwrap().is_none().then_some(())
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
    let owner = ms_api(&client, ns(&client))
        .create(&PostParams::default(), &ms("big", json!({})))
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    for i in 0..300 {
        let mut d = cm(&format!("d{i}"), &[]);
        d.metadata.owner_references = Some(vec![to_modelservice("big", &uid)]);
        api.create(&PostParams::default(), &d).await.unwrap();
    }
    ms_api(&client, ns(&client))
        .delete("big", &DeleteParams::default())
        .await
        .unwrap();
    crate::eventually_within(COLLECTED, "all dependents collected", || async {
        let list = api.list(&Default::default()).await.unwrap();
        list.items.iter().all(|c| !ours(c)).then_some(())
    })
    .await;
}
