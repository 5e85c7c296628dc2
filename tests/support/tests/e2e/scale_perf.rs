//! Load shape of the benchmarks: thousands of owners and dependents.
//!
//! Fake-only: the fake's speed at benchmark sizes.

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::{cm, eventually_within, ms, ms_api, start};

async fn load(owners: usize, per_owner: usize) {
    let (server, client) = start().await;
    let mss = ms_api(&client, "default");
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    // A watcher follows everything, as the operator's controller would.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    let follow = tokio::spawn(
        // With a backoff: a watch that fails at once (its client gone with
        // a runtime) would otherwise never yield, and hold the runtime's
        // shutdown.
        watcher(cms.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .for_each(move |_| {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async {}
            }),
    );
    let t = Instant::now();
    let mut uids = Vec::new();
    for i in 0..owners {
        let o = mss
            .create(
                &PostParams::default(),
                &ms(&format!("m{i}"), json!({"replicas": 1})),
            )
            .await
            .unwrap();
        uids.push(o.metadata.uid.unwrap());
    }
    for (i, uid) in uids.iter().enumerate() {
        for j in 0..per_owner {
            let mut c = cm(&format!("m{i}-c{j}"), &[("k", "v")]);
            c.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "serving.modelservice.dev/v1".into(),
                kind: "ModelService".into(),
                name: format!("m{i}"),
                uid: uid.clone(),
                ..Default::default()
            }]);
            cms.create(&PostParams::default(), &c).await.unwrap();
        }
    }
    let created = t.elapsed();
    let t = Instant::now();
    let n = cms.list(&ListParams::default()).await.unwrap().items.len();
    assert_eq!(n, owners * per_owner);
    let listed = t.elapsed();
    let total = owners * per_owner;
    eventually_within(
        std::time::Duration::from_secs(60),
        "the watcher to see every object",
        || async { (seen.load(std::sync::atomic::Ordering::Relaxed) >= total).then_some(()) },
    )
    .await;
    let t = Instant::now();
    for i in 0..owners {
        mss.delete(&format!("m{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually_within(
        std::time::Duration::from_secs(60),
        "every dependent to be collected",
        || async {
            server
                .list_objects("", "configmaps")
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let collected = t.elapsed();
    follow.abort();
    eprintln!(
        "{owners} owners x {per_owner}: create {created:?}, list {listed:?}, delete+gc {collected:?}"
    );
}

#[tokio::test]
async fn thousands_of_objects_stay_fast() {
    load(500, 3).await;
}

/// The benchmark's full size; run with `--ignored` to measure.
#[tokio::test]
#[ignore]
async fn benchmark_sized_load() {
    load(5_000, 3).await;
}
