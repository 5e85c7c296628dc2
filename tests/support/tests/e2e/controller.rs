//! A real kube-runtime Controller reconciling against the fake settles:
//! children are created, status is written, and then nothing more is written.
//!
//! Fake-only: the operator's own e2e suite runs a Controller on both back ends.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::{eventually, ms, ms_api, ms_resource, start};

async fn reconcile(obj: Arc<DynamicObject>, client: Arc<Client>) -> Result<Action, kube::Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let owner = obj.controller_owner_ref(&ms_resource()).expect("has uid");
    let child = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-child"), "ownerReferences": [owner]},
        "data": {"replicas": obj.data["spec"]["replicas"].to_string()},
    });
    let pp = PatchParams::apply("test-controller").force();
    Api::<ConfigMap>::namespaced((*client).clone(), &ns)
        .patch(&format!("{name}-child"), &pp, &Patch::Apply(child))
        .await?;
    let status = json!({
        "apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
        "metadata": {"name": name},
        "status": {"observedGeneration": obj.meta().generation},
    });
    ms_api(&client, &ns)
        .patch_status(&name, &pp, &Patch::Apply(status))
        .await?;
    Ok(Action::await_change())
}

#[tokio::test]
async fn controller_settles_without_a_write_storm() {
    let (server, client) = start().await;
    let mss = ms_api(&client, "default");
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let ctl = Controller::new_with(mss.clone(), watcher::Config::default(), ms_resource())
        .owns(cms.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(100)),
            Arc::new(client.clone()),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(ctl);

    mss.create(&PostParams::default(), &ms("m", json!({"replicas": 1})))
        .await
        .unwrap();
    let observed = |generation: i64| {
        let mss = mss.clone();
        async move {
            eventually("status to catch up", || async {
                let o = mss.get("m").await.ok()?;
                (o.data["status"]["observedGeneration"] == generation).then_some(())
            })
            .await
        }
    };
    observed(1).await;
    assert_eq!(
        cms.get("m-child").await.unwrap().data.unwrap()["replicas"],
        "1"
    );

    // Settled: watches stay open, but nobody writes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.reset_counts();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(server.counts().writes(), 0, "{:?}", server.counts());

    mss.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    observed(2).await;
    assert_eq!(
        cms.get("m-child").await.unwrap().data.unwrap()["replicas"],
        "2"
    );

    // Survives a restart of the API server.
    server.restart();
    mss.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    observed(3).await;

    mss.delete("m", &DeleteParams::default()).await.unwrap();
    eventually("child to be garbage collected", || async {
        cms.get_opt("m-child")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    task.abort();
}
