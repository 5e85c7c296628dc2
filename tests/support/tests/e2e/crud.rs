//! Create/get/list/update/delete and the exact Status bodies of failures.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::json;

use crate::{cm, ms, ms_api, ns, raw, rv_of, start, start_either, status_of};

#[tokio::test]
async fn create_get_list_update_delete() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());

    let created = api
        .create(&PostParams::default(), &cm("a", &[("k", "v")]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some(ns(&client)));
    assert_eq!(meta.uid.as_ref().map(String::len), Some(36));
    assert!(meta.creation_timestamp.is_some());
    assert!(meta.generation.is_none(), "configmaps have no generation");

    let got = api.get("a").await.unwrap();
    assert_eq!(got.metadata.resource_version, meta.resource_version);
    assert_eq!(got.data.unwrap()["k"], "v");

    let mut changed = api.get("a").await.unwrap();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert!(rv_of(&updated.metadata) > rv_of(meta));

    let list = api.list(&ListParams::default()).await.unwrap();
    // A real cluster's kube-controller-manager also publishes the
    // kube-root-ca.crt ConfigMap into every namespace; the fake, an API
    // server only, does not.
    let ours: Vec<_> = list
        .items
        .iter()
        .filter(|c| c.metadata.name.as_deref() != Some("kube-root-ca.crt"))
        .collect();
    assert_eq!(ours.len(), 1);
    assert!(
        rv_of(&ObjectMeta {
            resource_version: list.metadata.resource_version.clone(),
            ..Default::default()
        }) >= rv_of(&updated.metadata)
    );

    // Raw list: a ConfigMapList whose items, as a real server sends them,
    // carry no kind/apiVersion of their own (custom resources' items do).
    let (code, body) = raw(
        &client,
        "GET",
        &format!("/api/v1/namespaces/{}/configmaps", ns(&client)),
        None,
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "ConfigMapList");
    assert_eq!(body["apiVersion"], "v1");
    let items = body["items"].as_array().cloned().unwrap_or_default();
    assert!(!items.is_empty());
    for item in &items {
        assert_eq!(item.get("kind"), None);
        assert_eq!(item.get("apiVersion"), None);
    }

    // Built-in types answer a delete with a Status of kind Success.
    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    let status = deleted.right().expect("a Status for configmaps");
    assert_eq!(status.details.unwrap().name, "a");
    assert_eq!(status_of(api.get("a").await).code, 404);
}

#[tokio::test]
async fn not_found_body_is_shaped_like_the_real_one() {
    let (_backend, client) = start_either().await;
    let (code, body) = raw(
        &client,
        "GET",
        &format!("/apis/apps/v1/namespaces/{}/deployments/nope", ns(&client)),
        None,
        "",
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "deployments.apps \"nope\" not found", "reason": "NotFound",
            "details": {"name": "nope", "group": "apps", "kind": "deployments"}, "code": 404
        })
    );
    let (code, body) = raw(
        &client,
        "DELETE",
        &format!("/api/v1/namespaces/{}/configmaps/nope", ns(&client)),
        None,
        "",
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        body["details"],
        json!({"name": "nope", "kind": "configmaps"})
    );
}

#[tokio::test]
async fn already_exists_and_stale_update_conflicts() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();

    let s = status_of(api.create(&PostParams::default(), &cm("a", &[])).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(s.message, "configmaps \"a\" already exists");

    // A write moves the object on; `first` now carries a stale version.
    let mut bump = first.clone();
    bump.data = Some([("b".to_string(), "1".to_string())].into());
    api.replace("a", &PostParams::default(), &bump)
        .await
        .unwrap();
    let mut stale = first.clone();
    stale.data = Some([("x".to_string(), "y".to_string())].into());
    let s = status_of(api.replace("a", &PostParams::default(), &stale).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Without a resourceVersion the update is unconditional.
    stale.metadata.resource_version = None;
    api.replace("a", &PostParams::default(), &stale)
        .await
        .unwrap();
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["x"], "y");
}

#[tokio::test]
// fake-only: it reads the server's own resourceVersion counter.
async fn noop_update_keeps_resource_version() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let a = api
        .create(&PostParams::default(), &cm("a", &[("k", "v")]))
        .await
        .unwrap();
    let rv = server.resource_version();
    let again = api.replace("a", &PostParams::default(), &a).await.unwrap();
    assert_eq!(again.metadata.resource_version, a.metadata.resource_version);
    assert_eq!(server.resource_version(), rv);
}

#[tokio::test]
async fn resource_version_is_global_and_strictly_increasing() {
    let (_backend, client) = start_either().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mss = ms_api(&client, ns(&client));
    let mut last = 0;
    for i in 0..5 {
        let a = cms
            .create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
        let b = mss
            .create(&PostParams::default(), &ms(&format!("m{i}"), json!({})))
            .await
            .unwrap();
        let (ra, rb) = (rv_of(&a.metadata), rv_of(&b.metadata));
        assert!(last < ra && ra < rb, "{last} < {ra} < {rb}");
        last = rb;
    }
}

#[tokio::test]
async fn generate_name_and_missing_name() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut o = cm("", &[]);
    o.metadata.name = None;
    o.metadata.generate_name = Some("gen-".into());
    let a = api.create(&PostParams::default(), &o).await.unwrap();
    let b = api.create(&PostParams::default(), &o).await.unwrap();
    let (na, nb) = (a.metadata.name.unwrap(), b.metadata.name.unwrap());
    assert!(na.starts_with("gen-") && na.len() == 9, "{na}");
    assert_ne!(na, nb);

    // A long prefix is cut to 58 characters, so that the name fits 63: a
    // ReplicaSet of a long Deployment names its pods this way.
    let long = format!("{}-7d4b9c5f86-", "a".repeat(57));
    o.metadata.generate_name = Some(long.clone());
    let cut = api.create(&PostParams::default(), &o).await.unwrap();
    let name = cut.metadata.name.unwrap_or_default();
    assert_eq!(name.len(), 63, "{name}");
    assert!(name.starts_with(&long[..58]), "{name}");

    o.metadata.generate_name = None;
    let s = status_of(api.create(&PostParams::default(), &o).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
}

#[tokio::test]
async fn invalid_names_and_labels_are_rejected() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let s = status_of(api.create(&PostParams::default(), &cm("Upper", &[])).await);
    assert_eq!(s.code, 422);
    assert!(s.message.starts_with("ConfigMap \"Upper\" is invalid: metadata.name: Invalid value: \"Upper\": a lowercase RFC 1123 subdomain"), "{}", s.message);
    let mut bad = cm("ok", &[]);
    bad.metadata.labels = Some([("app".to_string(), "x".repeat(64))].into());
    assert_eq!(
        status_of(api.create(&PostParams::default(), &bad).await).code,
        422
    );
}

#[tokio::test]
async fn namespaces_must_exist_and_can_be_created() {
    let (_backend, client) = start_either().await;
    let elsewhere = format!("{}-elsewhere", ns(&client));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &elsewhere);
    let s = status_of(api.create(&PostParams::default(), &cm("a", &[])).await);
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(s.message, format!("namespaces \"{elsewhere}\" not found"));
    // Listing in a missing namespace is just empty.
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut namespace = k8s_openapi::api::core::v1::Namespace::default();
    namespace.metadata.name = Some(elsewhere.clone());
    let created = nss
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    assert!(nss.get("default").await.is_ok());
}

#[tokio::test]
// fake-only: it installs and removes types in the fake itself.
async fn unknown_resources_are_404_like_a_missing_crd() {
    let server = fake_apiserver::FakeApiServer::builder()
        .without_resource("modelservices")
        .start()
        .await;
    let client = server.client();
    let s = status_of(
        ms_api(&client, "default")
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(s.code, 404);
    let (code, body) = raw(
        &client,
        "GET",
        "/apis/serving.modelservice.dev/v1/namespaces/default/modelservices",
        None,
        "",
    )
    .await;
    assert_eq!((code, body), (404, json!("404 page not found\n")));

    server.install_resource(fake_apiserver::model_service());
    ms_api(&client, "default")
        .create(&PostParams::default(), &ms("m", json!({})))
        .await
        .unwrap();
    assert!(server.uninstall_resource("modelservices"));
    assert_eq!(
        status_of(ms_api(&client, "default").get("m").await).code,
        404
    );
}

#[tokio::test]
async fn custom_resources_answer_an_immediate_delete_with_a_status() {
    let (_backend, client) = start_either().await;
    let api = ms_api(&client, ns(&client));
    api.create(&PostParams::default(), &ms("m", json!({"replicas": 1})))
        .await
        .unwrap();
    let gone = api.delete("m", &DeleteParams::default()).await.unwrap();
    let status = gone.right().expect("a Status, as the real server answers");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    let details = status.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.group.as_str()),
        ("m", "serving.modelservice.dev")
    );
}

#[tokio::test]
async fn create_with_resource_version_is_rejected_like_etcd_storage_does() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut o = cm("a", &[]);
    o.metadata.resource_version = Some("5".into());
    let s = status_of(api.create(&PostParams::default(), &o).await);
    assert_eq!(s.code, 500);
    assert_eq!(
        s.message,
        "resourceVersion should not be set on objects to be created"
    );
}
