//! The upgrade story on a real API server, from each older release: that
//! release runs with its own CRD and reconciles a few objects written the
//! way its users wrote them; then this release's CRD and operator replace
//! them, and nothing the users run may notice.
//!
//! - From the v1alpha1-only release (the last commit before v1beta1), named
//!   by `MODELSERVICE_E2E_PREVIOUS_OPERATOR`.
//! - From the v1beta1 release (the last commit before v1), named by
//!   `MODELSERVICE_E2E_V1BETA1_OPERATOR`. `.ci/run` builds both.
//!
//! They delete and re-create the cluster-wide CRD, so they run alone (CI
//! runs `upgrade::` on its own).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use modelservice_operator::api::{CRD_NAME, ModelService};
use modelservice_operator::core::convert::{SERVED, V1, V1ALPHA1, V1BETA1, convert_object};
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, dynamic_ms_api, free_port, wait_for};
use crate::observe::*;

/// An older release and what its users wrote.
struct Hop {
    test: &'static str,
    /// Names the older release's operator binary.
    binary_var: &'static str,
    /// The version that release stores.
    stored: &'static str,
    /// Its CRD has a conversion webhook: its operator must serve it.
    serves_webhook: bool,
    /// What a GitOps repository of its users holds.
    manifests: fn(&str) -> Vec<Value>,
}

/// The previous release's own CRD, as its `crd` command prints it.
fn previous_crd(bin: &PathBuf) -> CustomResourceDefinition {
    let out = Command::new(bin)
        .arg("crd")
        .output()
        .expect("run the previous release");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::from_slice(&out.stdout).expect("its CRD parses")
}

fn this_crd() -> CustomResourceDefinition {
    serde_yaml::from_str(&modelservice_operator::api::crd_yaml().expect("renders")).expect("parses")
}

async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) {
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            CRD_NAME,
            &PatchParams::apply("e2e-installer").force(),
            &Patch::Apply(crd),
        )
        .await
        .expect("apply the CRD");
}

/// Back to a cluster that has never seen this release: every ModelService
/// and the CRD go, then the previous release's CRD comes.
async fn start_over_with(client: &Client, crd: &CustomResourceDefinition) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    if crds.get_opt(CRD_NAME).await.ok().flatten().is_some() {
        // Objects of finished scenarios whose operators are gone would hold
        // the CRD's deletion forever with their finalizers. Listed in the
        // first version that answers without a webhook: the stored one.
        for version in SERVED {
            let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource(version));
            let Ok(list) = all.list(&ListParams::default()).await else {
                continue;
            };
            for o in list {
                let api = dynamic_ms_api(client, &o.namespace().unwrap_or_default(), version);
                let _ = api
                    .patch(
                        &o.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
            break;
        }
        // The CRD may still name the webhook of a test binary that has
        // exited; the API server's cleanup of the instances would wait on
        // it (its v1alpha1 watch cache cannot list them) until it gives up.
        let _ = crds
            .patch(
                CRD_NAME,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}}),
                ),
            )
            .await;
        // The API server rebuilds the CRD's storage for the new conversion a
        // moment later; deleting before that leaves the cleanup on the old
        // one (CI caught it). A v1alpha1 list that succeeds was served by
        // the new one.
        wait_for("the CRD to serve without a webhook", CONVERGE, || async {
            Api::<DynamicObject>::all_with(client.clone(), &resource(V1ALPHA1))
                .list(&ListParams::default())
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        let _ = crds.delete(CRD_NAME, &DeleteParams::default()).await;
        wait_for("the CRD to be deleted", 2 * CONVERGE, || async {
            crds.get_opt(CRD_NAME)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
    }
    apply_crd(client, crd).await;
    wait_for("the previous CRD to be served", CONVERGE, || async {
        Api::<DynamicObject>::all_with(client.clone(), &resource(V1ALPHA1))
            .list(&ListParams::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
}

fn resource(api_version: &str) -> kube::api::ApiResource {
    let (group, version) = api_version.split_once('/').expect("group/version");
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(group, version, "ModelService"),
        "modelservices",
    )
}

/// What a GitOps repository of the v1alpha1 release holds.
fn v1alpha1_manifests(ns: &str) -> Vec<Value> {
    let image = serving_image();
    [
        ("plain", json!({"model": "Qwen/Qwen2.5-0.5B-Instruct", "image": image, "gpus": 0})),
        ("tuned", json!({"model": "Qwen/Qwen2.5-1.5B-Instruct", "modelVersion": "2024-09-19", "image": image,
            "gpus": 0, "replicas": 2, "port": 9000, "args": ["--max-model-len", "4096"],
            "env": [{"name": "HF_HOME", "value": "/cache"}], "resources": {"cpu": "1", "memory": "2Gi"},
            "strategy": "Recreate"})),
        ("scaled", json!({"model": "Qwen/Qwen2.5-0.5B-Instruct", "image": image, "gpus": 0,
            "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "targetQueueLength": 4}})),
    ]
    .into_iter()
    .map(|(name, spec)| json!({"apiVersion": V1ALPHA1, "kind": "ModelService",
        "metadata": {"name": name, "namespace": ns}, "spec": spec}))
    .collect()
}

/// What a GitOps repository of the v1beta1 release holds: v1beta1
/// manifests (the flat KEDA knob `cooldownSeconds` moves in v1; with the
/// HPA engine it changes nothing) and one still in v1alpha1.
fn v1beta1_manifests(ns: &str) -> Vec<Value> {
    let image = serving_image();
    let beta = |name: &str, spec: Value| {
        json!({"apiVersion": V1BETA1, "kind": "ModelService",
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    vec![
        beta(
            "preset",
            json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct", "version": "2024-09-19"},
                "runtime": {"image": image, "preset": "vllm", "args": ["--max-model-len", "4096"]},
                "resources": {"gpus": 0}, "replicas": 2, "rollout": {"surge": "Auto"}}),
        ),
        beta(
            "scaled",
            json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "runtime": {"image": image},
                "resources": {"gpus": 0},
                "autoscaling": {"engine": "HPA", "minReplicas": 1, "maxReplicas": 3,
                    "targetQueueLength": 4, "cooldownSeconds": 120}}),
        ),
        json!({"apiVersion": V1ALPHA1, "kind": "ModelService",
            "metadata": {"name": "legacy", "namespace": ns},
            "spec": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "image": image, "gpus": 0,
                "strategy": "Recreate"}}),
    ]
}

fn version_of(doc: &Value) -> &str {
    doc["apiVersion"].as_str().expect("apiVersion")
}

/// Applies each manifest in its own version, as `kubectl apply
/// --server-side` from the repository does.
async fn try_apply_all(env: &Env, docs: &[Value]) -> Result<Vec<DynamicObject>, String> {
    let mut out = Vec::new();
    for d in docs {
        let api = dynamic_ms_api(&env.client, &env.namespace, version_of(d));
        let name = d["metadata"]["name"].as_str().expect("name");
        out.push(
            api.patch(
                name,
                &PatchParams::apply("gitops").force(),
                &Patch::Apply(d),
            )
            .await
            .map_err(|e| format!("apply {name} in {}: {e}", version_of(d)))?,
        );
    }
    Ok(out)
}

async fn apply_all(env: &Env, docs: &[Value]) -> Vec<DynamicObject> {
    try_apply_all(env, docs)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Each object as its manifest's version reads it.
async fn read_all(env: &Env, docs: &[Value]) -> Vec<DynamicObject> {
    let mut out = Vec::new();
    for d in docs {
        let api = dynamic_ms_api(&env.client, &env.namespace, version_of(d));
        let name = d["metadata"]["name"].as_str().expect("name");
        out.push(
            api.get(name)
                .await
                .unwrap_or_else(|e| panic!("read {name}: {e}")),
        );
    }
    out
}

/// Per Deployment: (generation, pod template); and the uids of all pods.
async fn children(env: &Env) -> (BTreeMap<String, (Option<i64>, Value)>, Vec<String>) {
    let deps = env
        .api::<Deployment>()
        .list(&ListParams::default())
        .await
        .expect("deployments");
    let by_name = deps
        .into_iter()
        .map(|d| {
            let template = serde_json::to_value(&d.spec.template).expect("json");
            (d.name_any(), (d.metadata.generation, template))
        })
        .collect();
    let mut pods: Vec<String> = env
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .expect("pods")
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid)
        .collect();
    pods.sort();
    (by_name, pods)
}

fn ready_in(o: &DynamicObject) -> bool {
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1alpha1_objects_survive_the_upgrade_without_a_pod_restart() {
    upgrade_from(Hop {
        test: "upgrade::v1alpha1_objects_survive_the_upgrade_without_a_pod_restart",
        binary_var: "MODELSERVICE_E2E_PREVIOUS_OPERATOR",
        stored: "v1alpha1",
        serves_webhook: false,
        manifests: v1alpha1_manifests,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1beta1_objects_survive_the_upgrade_without_a_pod_restart() {
    upgrade_from(Hop {
        test: "upgrade::v1beta1_objects_survive_the_upgrade_without_a_pod_restart",
        binary_var: "MODELSERVICE_E2E_V1BETA1_OPERATOR",
        stored: "v1beta1",
        serves_webhook: true,
        manifests: v1beta1_manifests,
    })
    .await;
}

async fn upgrade_from(hop: Hop) {
    let test = hop.test;
    if !needs_real(
        test,
        "storage versions, and a webhook the API server calls, exist only on a real API server",
    ) {
        return;
    }
    let Some(previous) = std::env::var_os(hop.binary_var).map(PathBuf::from) else {
        eprintln!(
            "SKIPPED {test}: set {} to the operator binary of that release",
            hop.binary_var
        );
        return;
    };
    let env = Env::new().await;
    let client = env.client.clone();
    start_over_with(&client, &previous_crd(&previous)).await;

    // The previous release at work: the v1beta1 release with the flags this
    // one has, serving its webhook; the v1alpha1 release with the few flags
    // it knew.
    let (old, mut bare) = if hop.serves_webhook {
        let op = env
            .operator()
            .binary(&previous)
            .all_namespaces()
            .webhook_for_the_crd(free_port())
            .start();
        (Some(op), None)
    } else {
        let child = Command::new(&previous)
            .args(["run", "--namespace", &env.namespace])
            .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
            .env("KUBECONFIG", &env.kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the previous release");
        (None, Some(child))
    };
    let docs = (hop.manifests)(&env.namespace);
    // Writes in a version it does not store go through its webhook, once
    // it has pointed the CRD at itself.
    wait_for(
        "the previous release to take the manifests",
        CONVERGE,
        || async { try_apply_all(&env, &docs).await.ok() },
    )
    .await;
    let stored = dynamic_ms_api(
        &client,
        &env.namespace,
        &format!("{}/{}", modelservice_operator::api::GROUP, hop.stored),
    );
    wait_for(
        "the previous release to make every object Ready",
        CONVERGE,
        || async {
            let list = stored.list(&ListParams::default()).await.ok()?.items;
            (list.len() == docs.len() && list.iter().all(ready_in)).then_some(())
        },
    )
    .await;
    let before = read_all(&env, &docs).await;
    let (deployments, pods) = children(&env).await;
    assert_eq!(deployments.len(), docs.len());
    drop(old);
    if let Some(child) = bare.as_mut() {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let _ = child.wait();
    }

    // The upgrade: this release's CRD, then its operator. In a cluster both
    // releases point the CRD at the same Service; here the old operator ran
    // outside it and pointed the CRD at its URL, which the file's Service
    // cannot join (one or the other): the URL stays, as the Service would.
    let upgraded = std::time::Instant::now();
    let mut new_crd = this_crd();
    if hop.serves_webhook {
        let live = Api::<CustomResourceDefinition>::all(client.clone())
            .get(CRD_NAME)
            .await
            .expect("the CRD");
        new_crd.spec.conversion = live.spec.conversion;
    }
    apply_crd(&client, &new_crd).await;
    let port = free_port();
    let op = env
        .operator()
        .all_namespaces()
        .webhook_for_the_crd(port)
        .start();
    op.ready().await;
    eprintln!(
        "upgrade from {}: the new operator was ready {:?} after the new CRD",
        hop.stored,
        upgraded.elapsed()
    );

    // Every object reads back in its own version and in v1, unchanged in
    // meaning.
    wait_for("v1 reads of the old objects", CONVERGE, || async {
        env.api::<ModelService>()
            .list(&ListParams::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    for (was, now) in before.iter().zip(read_all(&env, &docs).await) {
        let name = was.name_any();
        assert_eq!(
            now.data["spec"], was.data["spec"],
            "{name}: the spec as its version reads it"
        );
        assert_eq!(now.metadata.generation, was.metadata.generation, "{name}");
        let v1 = env.api::<ModelService>().get(&name).await.expect("v1 read");
        let back = convert_object(
            serde_json::to_value(&v1).expect("json"),
            was.types.as_ref().map_or(V1, |t| t.api_version.as_str()),
        )
        .expect("converts");
        assert_eq!(
            back["spec"], was.data["spec"],
            "{name}: the v1 spec means the same"
        );
    }

    // The new operator has looked at each object, and changed no pod.
    wait_for(
        "the new operator to reconcile every object",
        CONVERGE,
        || async {
            (op.metric("modelservice_reconcile_total{result=\"success\"}")? >= docs.len() as f64)
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (deployments_after, pods_after) = children(&env).await;
    assert_eq!(
        deployments_after, deployments,
        "Deployment generations and pod templates unchanged"
    );
    assert_eq!(pods_after, pods, "no pod was replaced");

    // Storage migration finishes, and the metric says so.
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    wait_for("storedVersions to be [v1]", CONVERGE, || async {
        let crd = crds.get(CRD_NAME).await.ok()?;
        (crd.status?.stored_versions? == ["v1"]).then_some(())
    })
    .await;
    assert_eq!(
        op.metric("modelservice_storage_migration_complete"),
        Some(1.0)
    );
    eprintln!(
        "upgrade from {}: storage migration of {} objects complete {:?} after the new CRD",
        hop.stored,
        docs.len(),
        upgraded.elapsed()
    );

    // GitOps re-applies the same manifests, each in its old version:
    // nothing changes.
    let again = apply_all(&env, &docs).await;
    let v1 = dynamic_ms_api(&client, &env.namespace, V1);
    for (a, was) in again.iter().zip(&before) {
        let now = v1.get(&a.name_any()).await.expect("read");
        assert_eq!(
            a.resource_version(),
            now.resource_version(),
            "{}: the re-apply wrote",
            a.name_any()
        );
        assert_eq!(
            a.metadata.generation,
            was.metadata.generation,
            "{}",
            a.name_any()
        );
    }
    let versions = |l: kube::core::ObjectList<DynamicObject>| {
        l.items
            .iter()
            .map(|o| o.resource_version())
            .collect::<Vec<_>>()
    };
    let after_reapply = versions(v1.list(&ListParams::default()).await.expect("list"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        after_reapply,
        versions(v1.list(&ListParams::default()).await.expect("list")),
        "a re-apply that changes nothing writes nothing, and makes the operator write nothing"
    );
    assert_eq!(children(&env).await, (deployments, pods));

    // With the operator gone, v1 reads need no webhook any more.
    drop(op);
    let listed = Api::<ModelService>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("kubectl get modelservices works with the operator stopped");
    assert!(listed.items.len() >= docs.len());

    // Leave no finalizer behind for the namespace's deletion.
    for d in &docs {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let _ = env
            .api::<ModelService>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    env.finish().await;
}

/// cert-manager's way: the certificate, its key and the issuing CA are
/// files (a mounted Secret), and the API server trusts the webhook through
/// the `caBundle` the operator copies from `ca.crt`. It points the
/// cluster-wide CRD at this test's operator, so it runs with `upgrade::`,
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_from_cert_manager_files_are_served_and_trusted() {
    use modelservice_operator::webhook::certs::{Sans, issue_serving, new_ca};
    const NAME: &str = "upgrade::certificates_from_cert_manager_files_are_served_and_trusted";
    if !needs_real(
        NAME,
        "only a real API server calls the webhook and checks its certificate",
    ) {
        return;
    }
    let env = Env::new().await;
    let now = time::OffsetDateTime::now_utc();
    let ca = new_ca(now).expect("a CA");
    let serving = issue_serving(&ca, &Sans::for_host("127.0.0.1"), now).expect("a certificate");
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, pem) in [
        ("tls.crt", &serving.cert_pem),
        ("tls.key", &serving.key_pem),
        ("ca.crt", &ca.cert_pem),
    ] {
        std::fs::write(dir.path().join(file), pem).expect("write");
    }
    let port = free_port();
    let _op = env
        .operator()
        .webhook_for_the_crd(port)
        .arg("--webhook-certs")
        .arg("external")
        .arg("--webhook-cert-dir")
        .arg(dir.path().display().to_string())
        .start();
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    let url = format!("https://127.0.0.1:{port}/convert");
    wait_for("the CRD to trust cert-manager's CA", CONVERGE, || async {
        let config = crds
            .get(CRD_NAME)
            .await
            .ok()?
            .spec
            .conversion?
            .webhook?
            .client_config?;
        (config.url.as_deref() == Some(url.as_str())
            && config.ca_bundle.as_ref().map(|b| b.0.as_slice()) == Some(ca.cert_pem.as_bytes()))
        .then_some(())
    })
    .await;
    // A field v1alpha1 lacks, written in v1beta1 and read in v1alpha1: the
    // API server called the webhook over TLS with that certificate, both
    // ways (neither is the stored version).
    let beta = dynamic_ms_api(&env.client, &env.namespace, V1BETA1);
    let ms: DynamicObject = serde_json::from_value(json!({"apiVersion": V1BETA1, "kind": "ModelService",
        "metadata": {"name": "tls", "namespace": env.namespace},
        "spec": {"model": {"name": "m"}, "runtime": {"image": serving_image(), "preset": "tgi"}, "resources": {"gpus": 0}}}))
    .expect("object");
    beta.patch(
        "tls",
        &PatchParams::apply("gitops").force(),
        &Patch::Apply(&ms),
    )
    .await
    .expect("apply");
    let alpha = dynamic_ms_api(&env.client, &env.namespace, V1ALPHA1);
    let read = wait_for("a v1alpha1 read through the webhook", CONVERGE, || async {
        alpha.get("tls").await.ok()
    })
    .await;
    assert_eq!(read.data["spec"]["model"], "m");
    assert_eq!(
        read.metadata.annotations.unwrap_or_default()
            [modelservice_operator::core::convert::FIELDS_ANNOTATION],
        // Surge unset (Auto) waits as null: v1alpha1 itself means Never.
        r#"{"rollout":{"surge":null},"runtime":{"preset":"tgi"}}"#
    );
    let _ = env
        .api::<ModelService>()
        .patch(
            "tls",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    env.finish().await;
}
