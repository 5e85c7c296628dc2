//! labelSelector / fieldSelector on lists.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, PostParams};

use crate::{cm, raw, start, status_of};

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

// Fake-only: it pins two of the fake's documented divergences (`limit` is
// ignored, and the cluster holds only the test's objects).
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
    // limit/continue are accepted (one consistent page is returned).
    assert_eq!(names(&api, &ListParams::default().limit(2)).await.len(), 4);

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
