//! The demo's world: the project's fake API server with simulated GPU nodes
//! (`tests/support`), the CRD from `crds/`, a kubeconfig for `kubectl`, and
//! the operator binary running against it. Everything stops on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use fake_apiserver::FakeApiServer;
use fake_apiserver::simulator::{ClusterShape, Simulator};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use modelservice_operator::core::convert::convert_checked;

pub const NAMESPACE: &str = "demo";

pub struct Cluster {
    pub client: Client,
    pub sim: Simulator,
    pub kubeconfig: PathBuf,
    operator: Child,
    pub operator_log: PathBuf,
    _fake: FakeApiServer,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.operator.kill();
        let _ = self.operator.wait();
    }
}

/// Starts it all: `dir` receives the kubeconfig and the operator's log;
/// the CRDs in `extra_crds` (Gateway API's HTTPRoute) are installed before
/// the operator starts, so it finds them at once.
pub async fn start(
    dir: &Path,
    operator: &Path,
    shape: ClusterShape,
    extra_crds: &[PathBuf],
) -> Result<Cluster, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // The fake converts between API versions with the webhook's own code,
    // so v1alpha1 objects work with kubectl too.
    let fake = FakeApiServer::builder()
        .with_converter("modelservices", Arc::new(convert_checked))
        .start()
        .await;
    let kubeconfig = dir.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    let client = fake.client();
    let crd = modelservice_operator::api::crd().map_err(|e| format!("the CRD: {e}"))?;
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            modelservice_operator::api::CRD_NAME,
            &PatchParams::apply("demo").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|e| format!("installing the CRD: {e}"))?;
    for file in extra_crds {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let extra: CustomResourceDefinition =
            serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let name = extra.metadata.name.clone().unwrap_or_default();
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(
                &name,
                &PatchParams::apply("demo").force(),
                &Patch::Apply(&extra),
            )
            .await
            .map_err(|e| format!("installing {name}: {e}"))?;
    }
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map_err(|e| format!("creating namespace {NAMESPACE}: {e}"))?;
    let sim = Simulator::start(client.clone(), shape);
    let operator_log = dir.join("operator.log");
    let log = std::fs::File::create(&operator_log)
        .map_err(|e| format!("{}: {e}", operator_log.display()))?;
    let child = Command::new(operator)
        .args(["run", "--namespace", NAMESPACE, "--log-format", "text"])
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--webhook-addr",
            "127.0.0.1:0",
        ])
        .args([
            "--webhook-secret",
            &format!("{NAMESPACE}/modelservice-operator-webhook-certs"),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", operator.display()))?;
    Ok(Cluster {
        client,
        sim,
        kubeconfig,
        operator: child,
        operator_log,
        _fake: fake,
    })
}
