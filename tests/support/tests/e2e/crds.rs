//! CustomResourceDefinitions written through the API: the type is served
//! once the CRD is Established, and is gone, objects and all, once the CRD
//! is deleted.
//!
//! Each CRD has a group of its own, so the tests can run beside others on
//! a shared real cluster; each deletes what it created.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fake_apiserver::{Converter, FakeApiServer};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::{Backend, eventually, eventually_within, ms, ms_api, ns, raw, start_either, status_of};

/// How long a real server may take: its finalizer controller checks every
/// 5 s whether a deleted CRD's objects are gone.
const REAL_WAIT: Duration = Duration::from_secs(90);

/// A group no other run uses.
fn unique_group() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    format!("w{:08x}.diff.example.dev", h.finish() as u32)
}

fn widget_crd(group: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    }))
    .expect("a CRD")
}

fn widgets(client: &Client, group: &str, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", "Widget");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    )
}

fn widget(group: &str, name: &str, body: Value) -> DynamicObject {
    let mut o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": name},
    }))
    .expect("a widget");
    o.data = body;
    o
}

/// The condition `kind` of a CRD, as (status, reason).
fn condition(crd: &CustomResourceDefinition, kind: &str) -> Option<(String, String)> {
    crd.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// Names in the API group-version's discovery document, or `None` while it
/// is not served.
async fn discovered(client: &Client, group: &str) -> Option<Vec<String>> {
    let (code, body) = raw(client, "GET", &format!("/apis/{group}/v1"), None, "").await;
    (code == 200).then(|| {
        body["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect()
    })
}

#[tokio::test]
async fn a_crd_serves_its_type_until_it_is_deleted() {
    let (backend, client) = start_either().await;
    let ns = ns(&client).to_string();
    let group = unique_group();
    let name = format!("widgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());

    // The registry fills in names, conversion and storedVersions at once;
    // the names are accepted a moment later.
    let created = crds
        .create(&PostParams::default(), &widget_crd(&group))
        .await
        .unwrap();
    assert_eq!(created.spec.names.singular.as_deref(), Some("widget"));
    assert_eq!(created.spec.names.list_kind.as_deref(), Some("WidgetList"));
    assert_eq!(
        created
            .spec
            .conversion
            .as_ref()
            .map(|c| c.strategy.as_str()),
        Some("None")
    );
    let status = created.status.clone().expect("a status");
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    assert_eq!(created.metadata.generation, Some(1));

    let established = eventually_within(REAL_WAIT, "the CRD to be Established", || {
        let crds = crds.clone();
        let name = name.clone();
        async move {
            let crd = crds.get(&name).await.ok()?;
            (condition(&crd, "Established") == Some(("True".into(), "InitialNamesAccepted".into()))
                && condition(&crd, "NamesAccepted") == Some(("True".into(), "NoConflicts".into())))
            .then_some(crd)
        }
    })
    .await;
    let accepted = established
        .status
        .and_then(|s| s.accepted_names)
        .expect("acceptedNames");
    assert_eq!(
        (accepted.plural.as_str(), accepted.kind.as_str()),
        ("widgets", "Widget")
    );
    let names = eventually_within(REAL_WAIT, "discovery to list widgets", || {
        discovered(&client, &group)
    })
    .await;
    assert!(names.contains(&"widgets".to_string()), "{names:?}");
    assert!(names.contains(&"widgets/status".to_string()), "{names:?}");
    let api = widgets(&client, &group, &ns);
    eventually_within(REAL_WAIT, "a list of widgets to succeed", || {
        let api = api.clone();
        async move { api.list(&ListParams::default()).await.ok().map(|_| ()) }
    })
    .await;

    // A status subresource: creates drop status, /status writes only it.
    let w = widget(
        &group,
        "w",
        json!({"spec": {"color": "blue"}, "status": {"phase": "Made"}}),
    );
    let mut w = w;
    w.metadata.finalizers = Some(vec!["diff.example.dev/hold".into()]);
    let made = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(made.data.get("status"), None);
    assert_eq!(made.metadata.generation, Some(1));
    let patched = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "red"}, "status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["phase"], "Ready");
    assert_eq!(patched.data["spec"]["color"], "blue");
    assert_eq!(patched.metadata.generation, Some(1));

    // Deleting the CRD answers with it, terminating: the real server's
    // cleanup finalizer holds it until its objects are gone.
    let deleting = crds
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the CRD, terminating");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(
        deleting
            .finalizers()
            .contains(&"customresourcecleanup.apiextensions.k8s.io".to_string())
    );
    assert_eq!(deleting.metadata.generation, Some(1));
    assert_eq!(
        condition(&deleting, "Terminating"),
        Some(("True".into(), "InstanceDeletionPending".into()))
    );

    // The widget's finalizer holds the cleanup: it is being deleted, the
    // type is still served, but creates are refused.
    eventually_within(REAL_WAIT, "the widget to be deleted", || {
        let api = api.clone();
        async move {
            let w = api.get("w").await.ok()?;
            w.metadata.deletion_timestamp.map(|_| ())
        }
    })
    .await;
    let crd = crds.get(&name).await.unwrap();
    assert_eq!(
        condition(&crd, "Terminating"),
        Some(("True".into(), "InstanceDeletionInProgress".into()))
    );
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let refused = status_of(
        api.create(&PostParams::default(), &widget(&group, "late", json!({})))
            .await,
    );
    assert_eq!(
        (
            refused.code,
            refused.reason.as_str(),
            refused.message.as_str()
        ),
        (
            405,
            "MethodNotAllowed",
            "create not allowed while custom resource definition is terminating"
        )
    );

    // Once the widget's finalizer goes, so do the widget, the CRD and the type.
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually_within(REAL_WAIT, "the CRD to be gone", || {
        let crds = crds.clone();
        let name = name.clone();
        async move { crds.get_opt(&name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    eventually_within(REAL_WAIT, "the type to stop being served", || {
        let api = api.clone();
        async move {
            match api.list(&ListParams::default()).await {
                Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    assert_eq!(discovered(&client, &group).await, None);
    let (code, _) = raw(&client, "GET", "/apis", None, "").await;
    assert_eq!(code, 200);

    if let Backend::Real = backend {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(&ns, &DeleteParams::background())
            .await;
    }
}

#[tokio::test]
async fn an_invalid_crd_is_refused_with_the_fields_at_fault() {
    let (backend, client) = start_either().await;
    let group = unique_group();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut crd = widget_crd(&group);
    crd.metadata.name = Some(format!("gadgets.{group}"));
    crd.spec.versions[0].storage = false;
    let s = status_of(crds.create(&dry_run, &crd).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    let fields: Vec<String> = s
        .details
        .map(|d| d.causes.into_iter().map(|c| c.field).collect())
        .unwrap_or_default();
    assert_eq!(
        fields,
        ["metadata.name", "spec.versions", "status.storedVersions"]
    );
    assert_eq!(
        s.message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"gadgets.{group}\" is invalid: [\
             metadata.name: Invalid value: \"gadgets.{group}\": must be spec.names.plural+\".\"+spec.group, \
             spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{{\
             apiextensions.CustomResourceDefinitionVersion{{Name:\"v1\", Served:true, Storage:false, \
             Deprecated:false, DeprecationWarning:(*string)(nil), \
             Schema:(*apiextensions.CustomResourceValidation)(nil), \
             Subresources:(*apiextensions.CustomResourceSubresources)(nil), \
             AdditionalPrinterColumns:[]apiextensions.CustomResourceColumnDefinition(nil), \
             SelectableFields:[]apiextensions.SelectableField(nil)}}}}: \
             must have exactly one version marked as storage version, \
             status.storedVersions: Invalid value: []string(nil): must have at least one stored version]"
        )
    );

    let mut crd = widget_crd(&group);
    crd.spec.versions[0].subresources = Some(
        serde_json::from_value(json!({"scale": {
            "specReplicasPath": ".status.replicas", "statusReplicasPath": "status.replicas"}}))
        .expect("subresources"),
    );
    let s = status_of(crds.create(&dry_run, &crd).await);
    let causes: Vec<(String, String)> = s
        .details
        .map(|d| d.causes.into_iter().map(|c| (c.field, c.message)).collect())
        .unwrap_or_default();
    assert_eq!(
        causes,
        [
            (
                "spec.subresources.scale.specReplicasPath".to_string(),
                "Invalid value: \".status.replicas\": should be a json path under .spec"
                    .to_string()
            ),
            (
                "spec.subresources.scale.statusReplicasPath".to_string(),
                "Invalid value: \"status.replicas\": must be a simple json path starting with ."
                    .to_string()
            ),
        ]
    );

    if let Backend::Real = backend {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(ns(&client), &DeleteParams::background())
            .await;
    }
}

/// Fake-only: the conversion hook and the request counters are the fake's.
/// Applying the ModelService CRD over the built-in type keeps the test's
/// hook, the objects and the open watches; re-applying it changes nothing.
#[tokio::test]
async fn applying_the_modelservice_crd_keeps_the_hook_objects_and_watches() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let hook: Converter = Arc::new(move |mut o: Value, to: &str| {
        counted.fetch_add(1, Ordering::SeqCst);
        o["apiVersion"] = json!(to);
        Ok(o)
    });
    let server = FakeApiServer::builder()
        .with_converter("modelservices", hook)
        .start()
        .await;
    let client = server.client();
    let api = ms_api(&client, "default");
    api.create(&PostParams::default(), &ms("m", json!({"replicas": 1})))
        .await
        .unwrap();
    let mut watch = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Added(_)))));

    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds/modelservice.yaml"),
    )
    .expect("crds/modelservice.yaml");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("the CRD parses");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("crd-test").force();
    let applied = crds
        .patch(&crd.name_any(), &pp, &Patch::Apply(&crd))
        .await
        .unwrap();
    let established = eventually("the ModelService CRD to be Established", || {
        let crds = crds.clone();
        async move {
            let crd = crds
                .get("modelservices.serving.modelservice.dev")
                .await
                .ok()?;
            (condition(&crd, "Established").map(|c| c.0) == Some("True".into())).then_some(crd)
        }
    })
    .await;
    assert_ne!(
        established.metadata.resource_version,
        applied.metadata.resource_version
    );

    // Same objects, same watch, same hook, and /scale from the CRD.
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    assert!(matches!(
        watch.next().await,
        Some(Ok(WatchEvent::Modified(_)))
    ));
    let before = calls.load(Ordering::SeqCst);
    let (code, body) = raw(
        &client,
        "GET",
        "/apis/serving.modelservice.dev/v1alpha1/namespaces/default/modelservices/m",
        None,
        "",
    )
    .await;
    assert_eq!(
        (code, body["apiVersion"].clone()),
        (200, json!("serving.modelservice.dev/v1alpha1"))
    );
    assert!(
        calls.load(Ordering::SeqCst) > before,
        "the hook converted it"
    );
    let (code, scale) = raw(
        &client,
        "GET",
        "/apis/serving.modelservice.dev/v1/namespaces/default/modelservices/m/scale",
        None,
        "",
    )
    .await;
    assert_eq!((code, scale["spec"]["replicas"].clone()), (200, json!(2)));

    // Re-applying the same CRD is a no-op: nothing stored, nothing ended.
    let again = crds
        .patch(&crd.name_any(), &pp, &Patch::Apply(&crd))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        established.metadata.resource_version
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    assert!(matches!(
        watch.next().await,
        Some(Ok(WatchEvent::Modified(_)))
    ));
    drop(server);
}
