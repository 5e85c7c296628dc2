//! metadata.generation rules and the /status and /scale subresources.

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::{ms, ms_api, ns, raw, rv_of, start, start_either, status_of};

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "img:1"}]}
            }
        }
    }))
    .expect("valid deployment")
}

#[tokio::test]
async fn generation_bumps_only_on_spec_changes() {
    let (_backend, client) = start_either().await;
    let api = ms_api(&client, ns(&client));
    let pp = PatchParams::default();
    let o = api
        .create(&PostParams::default(), &ms("m", json!({"replicas": 1})))
        .await
        .unwrap();
    assert_eq!(o.metadata.generation, Some(1));

    let meta_patches = [
        json!({"metadata": {"labels": {"a": "b"}}}),
        json!({"metadata": {"annotations": {"a": "b"}}}),
        json!({"metadata": {"finalizers": ["example.com/f"]}}),
    ];
    let mut rv = rv_of(&o.metadata);
    for p in meta_patches {
        let o = api.patch("m", &pp, &Patch::Merge(&p)).await.unwrap();
        assert_eq!(o.metadata.generation, Some(1), "{p}");
        assert!(rv_of(&o.metadata) > rv);
        rv = rv_of(&o.metadata);
    }
    let o = api
        .patch("m", &pp, &Patch::Merge(&json!({"spec": {"replicas": 2}})))
        .await
        .unwrap();
    assert_eq!(o.metadata.generation, Some(2));
    let o = api
        .patch_status(
            "m",
            &pp,
            &Patch::Merge(&json!({"status": {"observedGeneration": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(
        o.metadata.generation,
        Some(2),
        "status writes never bump generation"
    );

    // Built-in types follow the same rule.
    let deps: Api<Deployment> = Api::default_namespaced(client);
    let d = deps
        .create(&PostParams::default(), &deployment("d", 1))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let d = deps
        .patch(
            "d",
            &pp,
            &Patch::Merge(&json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let d = deps
        .patch("d", &pp, &Patch::Merge(&json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
}

// Fake-only: it inspects what the fake stored through its own handle.
#[tokio::test]
async fn status_subresource_isolation() {
    let (server, client) = start().await;
    let api = ms_api(&client, "default");
    let pp = PatchParams::default();
    let mut obj = ms("m", json!({"replicas": 1}));
    obj.data["status"] = json!({"phase": "Made-up"});
    let o = api.create(&PostParams::default(), &obj).await.unwrap();
    assert!(o.data.get("status").is_none(), "create cannot set status");

    // Main endpoint: status changes are dropped (here: a no-op write).
    let rv = server.resource_version();
    let o = api
        .patch(
            "m",
            &pp,
            &Patch::Merge(&json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert!(o.data.get("status").is_none());
    assert_eq!(
        server.resource_version(),
        rv,
        "nothing changed, nothing written"
    );

    // /status endpoint: only status changes.
    let o = api
        .patch_status(
            "m",
            &pp,
            &Patch::Merge(&json!({
                "status": {"phase": "Ready"},
                "spec": {"replicas": 7},
                "metadata": {"labels": {"sneaky": "yes"}}
            })),
        )
        .await
        .unwrap();
    assert_eq!(o.data["status"]["phase"], "Ready");
    assert_eq!(o.data["spec"]["replicas"], 1);
    assert!(o.metadata.labels.is_none());

    // Main-endpoint PUT keeps the stored status.
    let mut whole = api.get("m").await.unwrap();
    whole.data["status"] = json!({"phase": "Overwritten"});
    whole.data["spec"]["replicas"] = json!(2);
    let o = api
        .replace("m", &PostParams::default(), &whole)
        .await
        .unwrap();
    assert_eq!(o.data["status"]["phase"], "Ready");
    assert_eq!(o.data["spec"]["replicas"], 2);

    // /status PUT honours the resourceVersion precondition.
    let s = status_of(
        api.replace_status("m", &PostParams::default(), &whole)
            .await,
    );
    assert_eq!(s.code, 409);
}

#[tokio::test]
async fn scale_subresource_of_a_custom_resource() {
    let (_backend, client) = start_either().await;
    let api = ms_api(&client, ns(&client));
    let pp = PatchParams::default();
    api.create(&PostParams::default(), &ms("m", json!({"replicas": 2})))
        .await
        .unwrap();
    api.patch_status(
        "m",
        &pp,
        &Patch::Merge(&json!({"status": {"replicas": 1, "selector": "app=m"}})),
    )
    .await
    .unwrap();

    let scale = api.get_scale("m").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    let st = scale.status.as_ref().unwrap();
    assert_eq!((st.replicas, st.selector.as_deref()), (1, Some("app=m")));

    let scaled = api
        .patch_scale("m", &pp, &Patch::Merge(&json!({"spec": {"replicas": 5}})))
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(5));
    let o = api.get("m").await.unwrap();
    assert_eq!(o.data["spec"]["replicas"], 5);
    assert_eq!(o.metadata.generation, Some(2));
    let mf = serde_json::to_value(&o.metadata.managed_fields).unwrap();
    assert!(
        mf.as_array()
            .unwrap()
            .iter()
            .any(|e| e["subresource"] == "scale"),
        "scale writes are recorded with subresource scale: {mf}"
    );

    // A stale resourceVersion on the Scale is a conflict.
    let mut stale = scale.clone();
    stale.spec.as_mut().unwrap().replicas = Some(9);
    let s = status_of(api.replace_scale("m", &PostParams::default(), &stale).await);
    assert_eq!(s.code, 409);
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!(
            "/apis/serving.modelservice.dev/v1/namespaces/{}/modelservices/m/scale",
            ns(&client)
        ),
        Some("application/merge-patch+json"),
        r#"{"spec":{"replicas":-1}}"#,
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
}

#[tokio::test]
async fn scale_subresource_of_a_deployment() {
    let (_backend, client) = start_either().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    let scale = deps.get_scale("web").await.unwrap();
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    let mut s = deps.get_scale("web").await.unwrap();
    s.spec.as_mut().unwrap().replicas = Some(4);
    // Unconditional: on a real cluster the Deployment controller writes the
    // Deployment's status in between, and a stale resourceVersion is a 409.
    s.metadata.resource_version = None;
    deps.replace_scale("web", &PostParams::default(), &s)
        .await
        .unwrap();
    assert_eq!(deps.get("web").await.unwrap().spec.replicas, Some(4));
    // Subresources the type does not have are 404s.
    let (code, _) = raw(
        &client,
        "GET",
        &format!("/api/v1/namespaces/{}/configmaps/x/scale", ns(&client)),
        None,
        "",
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn server_defaults_built_in_fields() {
    let (_backend, client) = start_either().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let mut d = deployment("web", 1);
    d.spec.replicas = None;
    let d = deps.create(&PostParams::default(), &d).await.unwrap();
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(1));
    let c = &spec.template.spec.unwrap().containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));

    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::default_namespaced(client);
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
    }))
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(spec.cluster_ip.is_some());
    assert_eq!(spec.ports.unwrap()[0].protocol.as_deref(), Some("TCP"));
}

#[tokio::test]
async fn quantities_are_stored_in_canonical_form() {
    let (_backend, client) = start_either().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let mut d = deployment("q", 1);
    if let Some(pod) = d.spec.template.spec.as_mut() {
        pod.containers[0].resources = Some(
            serde_json::from_value(serde_json::json!({
                "requests": {"cpu": "0.5", "memory": "1024Mi"},
                "limits": {"cpu": "1000m", "memory": "1.5Gi", "nvidia.com/gpu": "2"}
            }))
            .unwrap(),
        );
    }
    let stored = deps.create(&PostParams::default(), &d).await.unwrap();
    let r =
        serde_json::to_value(&stored.spec.template.spec.unwrap().containers[0].resources).unwrap();
    assert_eq!(
        r,
        serde_json::json!({"requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1536Mi", "nvidia.com/gpu": "2"}})
    );
}
