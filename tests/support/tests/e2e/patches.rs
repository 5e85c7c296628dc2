//! Merge, strategic-merge and JSON patches (with `test`), and PatchOptions
//! validation.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::{cm, ms, ms_api, ns, raw, start_either, status_of};

#[tokio::test]
async fn merge_patch_follows_rfc_7386() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(
        &PostParams::default(),
        &cm("a", &[("keep", "1"), ("drop", "2")]),
    )
    .await
    .unwrap();
    let o = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"drop": null, "new": "3"}})),
        )
        .await
        .unwrap();
    let data = o.data.unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!((data["keep"].as_str(), data["new"].as_str()), ("1", "3"));
    // A resourceVersion in the patch is a precondition.
    let s = status_of(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"resourceVersion": "1"}, "data": {"x": "y"}})),
        )
        .await,
    );
    assert_eq!(s.code, 409);
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let (_backend, client) = start_either().await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "main", "image": "m:1"}, {"name": "side", "image": "s:1"}]}
        }}
    }))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s:2"}]}}}});
    let o = api
        .patch("d", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let cs = o.spec.template.spec.unwrap().containers;
    let images: Vec<_> = cs
        .iter()
        .map(|c| (c.name.as_str(), c.image.as_deref().unwrap()))
        .collect();
    assert_eq!(images, [("main", "m:1"), ("side", "s:2")]);

    // Custom resources do not support strategic merge patch: 415.
    ms_api(&client, ns(&client))
        .create(&PostParams::default(), &ms("m", json!({})))
        .await
        .unwrap();
    let s = status_of(
        ms_api(&client, ns(&client))
            .patch(
                "m",
                &PatchParams::default(),
                &Patch::Strategic(&json!({"spec": {"x": 1}})),
            )
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (415, "UnsupportedMediaType"));
}

#[tokio::test]
async fn json_patch_with_test_operations() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("a", &[("k", "v")]))
        .await
        .unwrap();
    let ok: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"},
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/f"]}
    ]))
    .unwrap();
    let o = api
        .patch("a", &PatchParams::default(), &Patch::Json::<()>(ok))
        .await
        .unwrap();
    assert_eq!(o.data.unwrap()["k"], "w");
    assert_eq!(o.metadata.finalizers.unwrap(), ["example.com/f"]);

    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "not-it"},
        {"op": "replace", "path": "/data/k", "value": "x"}
    ]))
    .unwrap();
    let s = status_of(
        api.patch("a", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(
        api.get("a").await.unwrap().data.unwrap()["k"],
        "w",
        "nothing applied"
    );

    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("/api/v1/namespaces/{}/configmaps/a", ns(&client)),
        Some("application/json-patch+json"),
        "not json",
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
}

#[tokio::test]
async fn patch_options_are_validated_like_the_real_server() {
    let (_backend, client) = start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let path = &format!("/api/v1/namespaces/{}/configmaps/a", ns(&client));
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#;
    let (code, s) = raw(
        &client,
        "PATCH",
        path,
        Some("application/apply-patch+yaml"),
        body,
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{path}?force=true"),
        Some("application/merge-patch+json"),
        "{}",
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    let (code, _) = raw(&client, "PATCH", path, Some("text/plain"), "{}").await;
    assert_eq!(code, 415);
    // Non-apply patches of missing objects are 404s.
    let s = status_of(
        api.patch(
            "missing",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {}})),
        )
        .await,
    );
    assert_eq!(s.code, 404);
}
