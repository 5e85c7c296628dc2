//! The conversion webhook for scenarios that write v1alpha1 on a real
//! cluster.
//!
//! The CRD is cluster-wide and names one webhook, while every scenario runs
//! its own operator in its own namespace, side by side. So one operator
//! process per test binary, confined to an empty namespace, serves the
//! webhook and keeps the CRD pointing at it; the scenarios' operators serve
//! conversion too (every replica does) but are never named in the CRD. On
//! the fake API server none of this is needed: it converts in-process.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Client};
use modelservice_operator::api::CRD_NAME;
use serde_json::json;

use crate::harness::{free_port, wait_for};
use modelservice_operator::core::convert::V1ALPHA1;

static HOST: OnceLock<u16> = OnceLock::new();

/// Starts the shared webhook once per test binary and returns its port. It
/// lives exactly as long as this process: it runs under a shell that waits
/// for our end of a pipe to close, which the kernel does when we exit, how
/// ever we exit.
fn start_host() -> u16 {
    *HOST.get_or_init(|| {
        let port = free_port();
        let metrics = free_port();
        let log = std::env::temp_dir().join(format!("ms-e2e-webhook-host-{port}.log"));
        let script = format!(
            "\"$0\" run --namespace ms-e2e-webhook-host --metrics-addr 127.0.0.1:{metrics} \
             --webhook-addr 127.0.0.1:{port} --webhook-url https://127.0.0.1:{port}/convert \
             --webhook-secret default/ms-e2e-webhook-host-certs & pid=$!; cat >/dev/null; kill $pid"
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_modelservice-operator"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("webhook host log"))
            .spawn()
            .expect("start the webhook host");
        eprintln!(
            "conversion webhook host on 127.0.0.1:{port}, log {}",
            log.display()
        );
        if let Some(mut pipe) = child.stdin.take() {
            let _ = pipe.flush();
            // Held open for the life of the process; never written to.
            std::mem::forget(pipe);
        }
        std::mem::forget(child);
        port
    })
}

/// Returns once a v1alpha1 write to `namespace` converts: the CRD points at
/// the shared webhook, and it answers. (A write alone proves nothing: with
/// no conversion stanza the API server only relabels the object, and a
/// v1alpha1 create succeeds without any webhook.)
pub async fn ensure(client: &Client, namespace: &str) {
    let url = format!("https://127.0.0.1:{}/convert", start_host());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(
        "the CRD to name the shared conversion webhook",
        Duration::from_secs(60),
        || async {
            let crd = crds.get(CRD_NAME).await.ok()?;
            let conversion = crd.spec.conversion?;
            let config = conversion.webhook?.client_config?;
            (conversion.strategy == "Webhook"
                && config.url.as_deref() == Some(url.as_str())
                && config.ca_bundle.is_some())
            .then_some(())
        },
    )
    .await;
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": V1ALPHA1, "kind": "ModelService",
        "metadata": {"name": "conversion-probe", "namespace": namespace},
        "spec": {"model": "m", "image": "i", "gpus": 0}}))
    .expect("probe");
    let api = crate::harness::dynamic_ms_api(client, namespace, V1ALPHA1);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "the conversion webhook (a v1alpha1 dry-run create)",
        Duration::from_secs(60),
        || async { api.create(&dry, &probe).await.ok().map(|_| ()) },
    )
    .await;
}
