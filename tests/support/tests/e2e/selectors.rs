//! labelSelector / fieldSelector on lists.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, PostParams};

use crate::{cm, ours, raw, start, status_of};

fn labelled(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut o = cm(name, &[]);
    o.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    o
}

async fn names(api: &Api<ConfigMap>, lp: &ListParams) -> Vec<String> {
    api.list(lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.metadata.name.unwrap())
        .collect()
}

// Fake-only: it counts across the whole cluster, which on a real one holds
// more than the test's objects.
#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    api.create(&pp, &labelled("a", &[("app", "web"), ("tier", "front")]))
        .await
        .unwrap();
    api.create(&pp, &labelled("b", &[("app", "web"), ("tier", "back")]))
        .await
        .unwrap();
    api.create(&pp, &labelled("c", &[("app", "db")]))
        .await
        .unwrap();
    api.create(&pp, &labelled("d", &[])).await.unwrap();

    let cases: &[(&str, &[&str])] = &[
        ("app=web", &["a", "b"]),
        ("app==web", &["a", "b"]),
        ("app!=web", &["c", "d"]),
        ("tier in (front,back)", &["a", "b"]),
        ("tier notin (front)", &["b", "c", "d"]),
        ("tier", &["a", "b"]),
        ("!tier", &["c", "d"]),
        ("app=web,tier=back", &["b"]),
    ];
    for (sel, want) in cases {
        assert_eq!(
            names(&api, &ListParams::default().labels(sel)).await,
            *want,
            "{sel}"
        );
    }
    assert_eq!(
        names(&api, &ListParams::default().fields("metadata.name=c")).await,
        ["c"]
    );
    assert_eq!(
        names(
            &api,
            &ListParams::default().fields("metadata.namespace=default,metadata.name!=c")
        )
        .await,
        ["a", "b", "d"]
    );
    // limit cuts the list into pages (see the test below).
    assert_eq!(names(&api, &ListParams::default().limit(2)).await.len(), 2);

    let s = status_of(api.list(&ListParams::default().labels("a in b")).await);
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    let s = status_of(api.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!(s.code, 400);
    assert_eq!(s.message, "field label not supported: data.k");

    // Cluster-wide list across namespaces.
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        4
    );
    let (code, _) = raw(
        &client,
        "GET",
        "/api/v1/configmaps?labelSelector=app%3Dweb",
        None,
        "",
    )
    .await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn limit_and_continue_page_through_one_consistent_snapshot() {
    let (_backend, client) = crate::start_either().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    for n in ["a", "b", "c", "d", "e"] {
        api.create(&pp, &cm(n, &[])).await.unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("a continue token");
    assert!(first.metadata.remaining_item_count.is_some_and(|n| n >= 3));
    // Created after the first page: the later pages are the same snapshot.
    api.create(&pp, &cm("aa-late", &[])).await.unwrap();
    let mut names: Vec<String> = first
        .items
        .iter()
        .filter(|c| ours(c))
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let mut next = Some(token);
    while let Some(token) = next {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap();
        assert!(page.items.len() <= 2);
        assert_eq!(
            page.metadata.resource_version,
            first.metadata.resource_version
        );
        names.extend(
            page.items
                .iter()
                .filter(|c| ours(c))
                .filter_map(|c| c.metadata.name.clone()),
        );
        next = page.metadata.continue_.filter(|c| !c.is_empty());
    }
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    let s = status_of(
        api.list(&ListParams::default().limit(2).continue_token("12-999999"))
            .await,
    );
    assert!(matches!(s.code, 400 | 410), "an unknown token: {s:?}");
}

/// The operator's surge decision counts the GPUs of pods that still hold
/// them: a cluster-wide list with `status.phase!=Succeeded,status.phase!=Failed`
/// (both terms must hold) leaves out finished pods and keeps the rest.
#[tokio::test]
async fn a_cluster_wide_pod_list_leaves_out_finished_pods_by_phase() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};
    let (_backend, client) = crate::start_either().await;
    let namespace = crate::ns(&client).to_string();
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    // Bound to a node no kubelet runs, so only this test writes their status.
    for (name, phase) in [
        ("running", "Running"),
        ("done", "Succeeded"),
        ("failed", "Failed"),
        ("pending", ""),
    ] {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"nodeName": "no-such-node", "containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        api.create(&PostParams::default(), &pod).await.unwrap();
        if !phase.is_empty() {
            api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": {"phase": phase}})),
            )
            .await
            .unwrap();
        }
    }
    let active = ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed");
    let mut names: Vec<String> = Api::<Pod>::all(client.clone())
        .list(&active)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["pending", "running"]);
    let s = status_of(
        Api::<Pod>::all(client.clone())
            .list(&ListParams::default().fields("status.reason!=x"))
            .await,
    );
    assert_eq!(s.code, 400);
    for name in ["running", "done", "failed", "pending"] {
        let _ = api.delete(name, &Default::default()).await;
    }
}
