//! kube-runtime's watcher/reflector against the fake, and a real TCP client
//! built from the written kubeconfig.
//!
//! Fake-only: it checks the fake's kubeconfig and TCP serving.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config};

use crate::{cm, eventually, start};

#[tokio::test]
async fn reflector_follows_changes_across_dropped_watches_and_restarts() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("before", &[]))
        .await
        .unwrap();

    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    let has = |name: &'static str| {
        let reader = reader.clone();
        async move {
            eventually(name, || async {
                reader
                    .state()
                    .iter()
                    .any(|o| o.metadata.name.as_deref() == Some(name))
                    .then_some(())
            })
            .await
        }
    };
    has("before").await;

    api.create(&PostParams::default(), &cm("live", &[]))
        .await
        .unwrap();
    has("live").await;

    server.drop_watches();
    api.create(&PostParams::default(), &cm("after-drop", &[]))
        .await
        .unwrap();
    has("after-drop").await;

    server.restart();
    api.create(&PostParams::default(), &cm("after-restart", &[]))
        .await
        .unwrap();
    has("after-restart").await;
    api.delete("before", &Default::default()).await.unwrap();
    eventually("before to leave the cache", || async {
        (!reader
            .state()
            .iter()
            .any(|o| o.metadata.name.as_deref() == Some("before")))
        .then_some(())
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn a_kubeconfig_client_works_over_tcp() {
    let (server, _client) = start().await;
    assert!(server.url().starts_with("http://127.0.0.1:"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = Client::try_from(config).unwrap();

    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("tcp", &[]))
        .await
        .unwrap();
    assert!(
        server
            .get_object("", "configmaps", "default", "tcp")
            .is_some()
    );
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");

    // Watches stream over TCP too.
    let mut events = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap();
    assert_eq!(
        first.unwrap().unwrap().metadata.name.as_deref(),
        Some("tcp")
    );
}

#[tokio::test]
async fn metadata_only_requests_get_partial_objects() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("a", &[("secret", "data")]))
        .await
        .unwrap();
    let m = api.get_metadata("a").await.unwrap();
    assert_eq!(m.types.unwrap().kind, "PartialObjectMetadata");
    let list = api.list_metadata(&Default::default()).await.unwrap();
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("a"));
    let (_, raw_list) = crate::raw_with_accept(
        &client,
        "/api/v1/namespaces/default/configmaps",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(raw_list["kind"], "PartialObjectMetadataList");
    assert!(raw_list["items"][0].get("data").is_none());

    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(client.clone());
    let mut events = watcher(meta_api, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap();
    assert_eq!(first.unwrap().unwrap().metadata.name.as_deref(), Some("a"));
}
