//! A local `run` just works (issue 27): outside a cluster, with no webhook
//! flag, the operator points the CRD's conversion at its own webhook on this
//! host, so v1alpha1 objects are served; once it stops, re-applying the CRD
//! file with `kubectl apply` is accepted (before, the URL it left beside
//! the file's Service was refused: "exactly one of url or service").
//!
//! It changes the cluster-wide CRD, so on a real cluster it runs alone
//! (`.ci/run`), with `kubectl` from `../shared/k8s` (`$REALK8S_DIR/bin`) or
//! the PATH. On the fake API server it is skipped: the fake converts
//! in-process and has no kubectl of its own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use modelservice_operator::api::CRD_NAME;
use modelservice_operator::core::convert::V1ALPHA1;
use serde_json::json;

use crate::harness::{CONVERGE, Env, dynamic_ms_api, free_port, wait_for};
use crate::observe::needs_real;

fn kubectl() -> PathBuf {
    std::env::var_os("REALK8S_DIR")
        .map(|d| PathBuf::from(d).join("bin/kubectl"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

fn crd_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/modelservice.yaml")
}

/// `kubectl apply -f crds/modelservice.yaml` (client-side, as a user does).
fn apply_crd_file(env: &Env) -> Result<(), String> {
    let out = Command::new(kubectl())
        .arg("apply")
        .arg("-f")
        .arg(crd_file())
        .env("KUBECONFIG", &env.kubeconfig)
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

async fn client_config(env: &Env) -> serde_json::Value {
    let crd = Api::<CustomResourceDefinition>::all(env.client.clone())
        .get(CRD_NAME)
        .await
        .expect("the CRD");
    let v = serde_json::to_value(crd).expect("JSON");
    let mut cc = v["spec"]["conversion"]["webhook"]["clientConfig"].clone();
    if let Some(m) = cc.as_object_mut() {
        m.remove("caBundle");
    }
    cc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_run_serves_v1alpha1_and_leaves_a_crd_that_applies_again() {
    if !needs_real(
        "a_local_run_serves_v1alpha1_and_leaves_a_crd_that_applies_again",
        "it runs kubectl against the CRD of a real API server",
    ) {
        return;
    }
    let env = Env::new().await;
    // From the file's own conversion (other scenarios point the shared CRD
    // at their webhooks), as on a cluster where the CRD was just installed.
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    let file: CustomResourceDefinition =
        serde_yaml::from_str(&std::fs::read_to_string(crd_file()).expect("crds/"))
            .expect("the CRD file");
    let mut conversion = serde_json::to_value(&file.spec.conversion).expect("JSON");
    conversion["webhook"]["clientConfig"]["url"] = serde_json::Value::Null;
    crds.patch(
        CRD_NAME,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"conversion": conversion}})),
    )
    .await
    .expect("the file's conversion");
    apply_crd_file(&env).expect("the first kubectl apply of the CRD");
    let port = free_port();
    let mut op = env.operator().local_webhook(port).start();
    let url = format!("https://127.0.0.1:{port}/convert");
    wait_for("the CRD pointed at the local webhook", CONVERGE, || async {
        (client_config(&env).await == json!({"url": url})).then_some(())
    })
    .await;

    // A v1alpha1 object goes through the webhook and reads back.
    let alpha = dynamic_ms_api(&env.client, &env.namespace, V1ALPHA1);
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": V1ALPHA1, "kind": "ModelService",
        "metadata": {"name": "old", "namespace": env.namespace},
        "spec": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "image": "vllm/vllm-openai:v0.8.5", "gpus": 0}}))
    .expect("object");
    wait_for(
        "a v1alpha1 create through the webhook",
        CONVERGE,
        || async { alpha.create(&PostParams::default(), &obj).await.ok() },
    )
    .await;
    let read = alpha.get("old").await.expect("read back in v1alpha1");
    assert_eq!(read.data["spec"]["model"], "Qwen/Qwen2.5-0.5B-Instruct");

    env.api::<modelservice_operator::api::ModelService>()
        .delete("old", &Default::default())
        .await
        .expect("delete it while its webhook serves");

    // Stopped, the CRD file applies again, and the file's Service is back alone.
    op.signal("TERM");
    op.exited(Duration::from_secs(20)).await;
    apply_crd_file(&env).expect("kubectl apply of the CRD after a local run");
    let cc = client_config(&env).await;
    assert!(cc.get("url").is_none(), "{cc}");
    assert_eq!(
        cc["service"]["name"], "modelservice-operator-webhook",
        "{cc}"
    );
    env.finish().await;
}
