//! One harness, two back ends.
//!
//! By default every test gets its own in-process fake API server (plus the
//! cluster simulator that stands in for kube-controller-manager, the scheduler
//! and kubelet). With `MODELSERVICE_E2E=1` the same tests run against the
//! cluster in the current kubeconfig, each in a fresh namespace that is
//! deleted afterwards. Either way the operator under test is the real binary,
//! started as a child process with a kubeconfig.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use fake_apiserver::simulator::{ClusterShape, Simulator};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use modelservice_operator::api::ModelService;
use modelservice_operator::core::convert::{
    V1, V1ALPHA1, V1BETA1, convert_checked, convert_object,
};
use serde_json::{Value, json};

/// The API version the scenarios write ModelServices in:
/// `MODELSERVICE_E2E_API_VERSION=v1alpha1` (or `v1beta1`) runs them all
/// through a deprecated version (and so through conversion); v1 otherwise.
/// The operator always reads v1.
pub fn api_version() -> &'static str {
    match std::env::var("MODELSERVICE_E2E_API_VERSION").as_deref() {
        Ok("v1alpha1") => V1ALPHA1,
        Ok("v1beta1") => V1BETA1,
        _ => V1,
    }
}

/// ModelServices in `namespace` at the URL of `api_version`.
pub fn dynamic_ms_api(client: &Client, namespace: &str, api_version: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').expect("group/version");
    let gvk = GroupVersionKind::gvk(group, version, "ModelService");
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "modelservices"),
    )
}

/// Whether the suite runs against a real cluster.
pub fn real_cluster() -> bool {
    std::env::var("MODELSERVICE_E2E").is_ok_and(|v| v == "1")
}

/// A test's world: a client, a namespace, and a kubeconfig for the binary.
pub struct Env {
    pub client: Client,
    pub namespace: String,
    pub kubeconfig: PathBuf,
    pub fake: Option<FakeApiServer>,
    pub sim: Option<Simulator>,
    _dir: tempfile::TempDir,
}

fn unique(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    format!("{prefix}-{:08x}", h.finish() as u32)
}

impl Env {
    /// A fresh world with the default simulated cluster (3 nodes, 8 GPUs each).
    pub async fn new() -> Env {
        Self::with_shape(ClusterShape::default()).await
    }

    pub async fn with_shape(shape: ClusterShape) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let namespace = unique("ms-e2e");
        let env = if real_cluster() {
            let client = Client::try_default()
                .await
                .expect("MODELSERVICE_E2E=1 needs a working kubeconfig");
            let kubeconfig = std::env::var_os("KUBECONFIG")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".kube/config")
                });
            install_crd(&client).await;
            Env {
                client,
                namespace,
                kubeconfig,
                fake: None,
                sim: None,
                _dir: dir,
            }
        } else {
            // The fake stands in for the API server and the conversion
            // webhook alike: it converts with the webhook's own code.
            let fake = FakeApiServer::builder()
                .with_converter("modelservices", std::sync::Arc::new(convert_checked))
                .start()
                .await;
            let kubeconfig = dir.path().join("kubeconfig");
            fake.write_kubeconfig(&kubeconfig).expect("kubeconfig");
            let client = fake.client();
            install_crd(&client).await;
            let nodes = shape.nodes;
            let sim = Simulator::start(client.clone(), shape);
            // A cluster starts with its nodes, as a real one does.
            wait_for("the simulated nodes", CONVERGE, || async {
                let api = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
                let listed = api.list(&Default::default()).await.ok()?;
                (listed.items.len() >= nodes
                    && listed.items.iter().all(|n| {
                        n.status
                            .as_ref()
                            .and_then(|s| s.allocatable.as_ref())
                            .is_some()
                    }))
                .then_some(())
            })
            .await;
            Env {
                client,
                namespace,
                kubeconfig,
                fake: Some(fake),
                sim: Some(sim),
                _dir: dir,
            }
        };
        let ns: Namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": env.namespace, "labels": {"modelservice.dev/e2e": "true"}}}))
        .expect("namespace");
        Api::<Namespace>::all(env.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        if api_version() != V1 {
            env.with_conversion().await;
        }
        env
    }

    pub fn fake(&self) -> &FakeApiServer {
        self.fake
            .as_ref()
            .expect("this scenario needs the fake API server")
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// A ModelService document in the API version this run writes (see
    /// [`api_version`]), from a spec in the v1alpha1 shape that the
    /// scenarios are written in: converted by the operator's own code, so
    /// every scenario runs in either version.
    pub fn ms_object(&self, name: &str, spec: Value) -> Value {
        let ms = json!({"apiVersion": V1ALPHA1, "kind": "ModelService",
            "metadata": {"name": name, "namespace": self.namespace}, "spec": spec});
        convert_object(ms, api_version()).expect("test specs convert")
    }

    /// ModelServices at the URL of the version this run writes.
    pub fn ms_api(&self) -> Api<DynamicObject> {
        dynamic_ms_api(&self.client, &self.namespace, api_version())
    }

    /// Makes sure writes and reads in either version convert: on a real
    /// cluster, the shared webhook (see `webhook_host`); the fake converts
    /// by itself.
    pub async fn with_conversion(&self) {
        if self.fake.is_none() {
            crate::webhook_host::ensure(&self.client, &self.namespace).await;
        }
    }

    /// Server-side applies a ModelService (a spec in the v1alpha1 shape) as
    /// `pp`'s field manager, in this run's version, and returns it as the
    /// operator reads it (v1).
    pub async fn try_apply_ms(
        &self,
        name: &str,
        spec: Value,
        pp: &PatchParams,
    ) -> Result<ModelService, kube::Error> {
        let applied = self
            .ms_api()
            .patch(name, pp, &Patch::Apply(&self.ms_object(name, spec)))
            .await?;
        let value = serde_json::to_value(applied).expect("object serializes");
        Ok(
            serde_json::from_value(convert_object(value, V1).expect("converts"))
                .expect("a ModelService"),
        )
    }

    /// Applies a ModelService as a user or GitOps tool would (its own field manager).
    pub async fn apply_ms(&self, name: &str, spec: Value) -> ModelService {
        self.try_apply_ms(name, spec, &PatchParams::apply("e2e-user").force())
            .await
            .expect("apply ModelService")
    }

    /// A ModelService document from a spec in the v1 shape, in the version
    /// this run writes: for fields v1alpha1 lacks (KEDA, canaries, ...),
    /// which a v1alpha1 run carries through the conversion annotation.
    pub fn ms_object_v1(&self, name: &str, spec: Value) -> Value {
        let ms = json!({"apiVersion": V1, "kind": "ModelService",
            "metadata": {"name": name, "namespace": self.namespace}, "spec": spec});
        convert_object(ms, api_version()).expect("test specs convert")
    }

    /// Applies a ModelService whose spec is in the v1 shape.
    pub async fn apply_ms_v1(&self, name: &str, spec: Value) {
        self.ms_api()
            .patch(
                name,
                &PatchParams::apply("e2e-user").force(),
                &Patch::Apply(&self.ms_object_v1(name, spec)),
            )
            .await
            .expect("apply ModelService");
    }

    /// Installs KEDA's ScaledObject CRD (v2.19.0, as upstream ships it) and
    /// waits until it is served. There is no KEDA controller: scenarios
    /// write what KEDA would.
    pub async fn install_keda_crd(&self) {
        self.install_crd("keda.sh_scaledobjects.yaml", self.scaled_objects())
            .await;
    }

    /// Removes KEDA's ScaledObject CRD and waits until it is gone.
    pub async fn remove_keda_crd(&self) {
        self.remove_crd("scaledobjects.keda.sh").await;
    }

    /// Installs Gateway API's HTTPRoute CRD (v1.3.0, as upstream ships it)
    /// and waits until it is served. There is no Gateway controller:
    /// scenarios write what one would.
    pub async fn install_gateway_crd(&self) {
        self.install_crd("gateway.networking.k8s.io_httproutes.yaml", self.routes())
            .await;
    }

    /// Removes Gateway API's HTTPRoute CRD and waits until it is gone.
    pub async fn remove_gateway_crd(&self) {
        self.remove_crd("httproutes.gateway.networking.k8s.io")
            .await;
    }

    /// Installs the Gateway API Inference Extension's InferencePool CRD
    /// (v1.6.0, as upstream ships it) and waits until it is served. There is
    /// no Gateway and no endpoint picker runs: scenarios write what a
    /// Gateway would.
    pub async fn install_pool_crd(&self) {
        self.install_crd(
            "inference.networking.k8s.io_inferencepools.yaml",
            self.pools(),
        )
        .await;
    }

    /// Removes the InferencePool CRD and waits until it is gone.
    pub async fn remove_pool_crd(&self) {
        self.remove_crd("inferencepools.inference.networking.k8s.io")
            .await;
    }

    /// Installs LeaderWorkerSet's CRD (v0.10.0, as upstream ships it) and
    /// waits until it is served. No LWS controller runs: scenarios start
    /// `lws::LwsController`, which does its part.
    pub async fn install_lws_crd(&self) {
        self.install_crd(
            "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
            crate::lws::lws_api(&self.client, &self.namespace),
        )
        .await;
    }

    /// Removes the LeaderWorkerSet CRD and waits until it is gone.
    pub async fn remove_lws_crd(&self) {
        self.remove_crd("leaderworkersets.leaderworkerset.x-k8s.io")
            .await;
    }

    /// Applies a CRD from `tests/fixtures/crds/` and waits until `api` answers.
    async fn install_crd(&self, file: &str, api: Api<DynamicObject>) {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/crds")
                .join(file),
        )
        .expect("a CRD fixture");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("crd parses");
        Api::<CustomResourceDefinition>::all(self.client.clone())
            .patch(
                &crd.name_any(),
                &PatchParams::apply("e2e-installer").force(),
                &Patch::Apply(&crd),
            )
            .await
            .expect("install the CRD");
        wait_for(
            &format!("the API of {file} to be served"),
            Duration::from_secs(30),
            || {
                let api = api.clone();
                async move { api.list(&Default::default()).await.ok().map(|_| ()) }
            },
        )
        .await;
    }

    /// Deletes the CRD `name` and waits until it is gone.
    async fn remove_crd(&self, name: &str) {
        let api = Api::<CustomResourceDefinition>::all(self.client.clone());
        let _ = api.delete(name, &DeleteParams::background()).await;
        wait_for("the CRD to be gone", Duration::from_secs(120), || {
            let api = api.clone();
            async move {
                api.get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .is_none()
                    .then_some(())
            }
        })
        .await;
    }

    /// HTTPRoutes in this test's namespace.
    pub fn routes(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "httproutes");
        Api::namespaced_with(self.client.clone(), &self.namespace, &ar)
    }

    /// InferencePools in this test's namespace.
    pub fn pools(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("inference.networking.k8s.io", "v1", "InferencePool");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "inferencepools");
        Api::namespaced_with(self.client.clone(), &self.namespace, &ar)
    }

    /// ScaledObjects in this test's namespace.
    pub fn scaled_objects(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "scaledobjects");
        Api::namespaced_with(self.client.clone(), &self.namespace, &ar)
    }

    /// Starts the operator binary limited to this test's namespace.
    pub fn operator(&self) -> OperatorBuilder<'_> {
        OperatorBuilder {
            env: self,
            args: Vec::new(),
            all_namespaces: false,
            webhook_port: None,
            local_webhook: None,
            binary: None,
        }
    }

    /// Deletes the namespace on a real cluster (the fake is simply dropped).
    pub async fn finish(self) {
        if self.fake.is_none() {
            let _ = Api::<Namespace>::all(self.client.clone())
                .delete(&self.namespace, &DeleteParams::background())
                .await;
        }
    }
}

async fn install_crd(client: &Client) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/modelservice.yaml"),
    )
    .expect("crds/modelservice.yaml");
    let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("crd parses");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let live = api.get_opt(&crd.name_any()).await.ok().flatten();
    // Scenarios run side by side, and the conversion stanza belongs to
    // whoever serves the webhook (see `webhook_host`): a CRD that already
    // serves these versions is left alone, and an install keeps the
    // conversion the cluster has (none on a fresh one) rather than forcing
    // the manifest's Service back beside that webhook's URL.
    if let Some(live) = &live {
        if serde_json::to_value(&live.spec.versions).ok()
            == serde_json::to_value(&crd.spec.versions).ok()
        {
            return;
        }
    }
    crd.spec.conversion = live.and_then(|l| l.spec.conversion);
    api.patch(
        "modelservices.serving.modelservice.dev",
        &PatchParams::apply("e2e-installer").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("install CRD");
    // A real API server needs a moment before the new type is served.
    wait_for(
        "the ModelService API to be served",
        Duration::from_secs(30),
        || {
            let api: Api<ModelService> = Api::all(client.clone());
            async move { api.list(&Default::default()).await.ok().map(|_| ()) }
        },
    )
    .await;
}

/// Polls `f` every 100 ms until it returns `Some`, or panics after `timeout`
/// naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match poll_for(timeout, f).await {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// Polls `f` every 100 ms until it returns `Some`; `None` after `timeout`.
async fn poll_for<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The usual time budget for convergence: generous, because CI machines are slow.
pub const CONVERGE: Duration = Duration::from_secs(60);

pub struct OperatorBuilder<'a> {
    env: &'a Env,
    args: Vec<String>,
    all_namespaces: bool,
    webhook_port: Option<u16>,
    local_webhook: Option<u16>,
    binary: Option<PathBuf>,
}

impl OperatorBuilder<'_> {
    /// Watches every namespace, as an installed operator does (and so runs
    /// the storage migration when it leads).
    pub fn all_namespaces(mut self) -> Self {
        self.all_namespaces = true;
        self
    }
    /// Serves the webhook on `port` and points the CRD at it, as the
    /// operator of a cluster does.
    pub fn webhook_for_the_crd(mut self, port: u16) -> Self {
        self.webhook_port = Some(port);
        self
    }
    /// Serves the webhook on `port` with no `--webhook-url`: a local run
    /// as a user starts it (outside a cluster it points the CRD here).
    pub fn local_webhook(mut self, port: u16) -> Self {
        self.local_webhook = Some(port);
        self
    }
    /// Runs another build of the operator (an older release) with the same
    /// flags.
    pub fn binary(mut self, path: &Path) -> Self {
        self.binary = Some(path.to_path_buf());
        self
    }
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn start(self) -> Operator {
        let port = free_port();
        let log = self.env._dir.path().join(format!("operator-{port}.log"));
        let mut cmd = Command::new(
            self.binary
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_modelservice-operator"))),
        );
        cmd.arg("run");
        if !self.all_namespaces {
            cmd.arg("--namespace").arg(&self.env.namespace);
        }
        match (self.webhook_port, self.local_webhook) {
            (Some(p), _) => cmd
                .arg("--webhook-addr")
                .arg(format!("127.0.0.1:{p}"))
                .arg("--webhook-url")
                .arg(format!("https://127.0.0.1:{p}/convert")),
            (None, Some(p)) => cmd.arg("--webhook-addr").arg(format!("127.0.0.1:{p}")),
            // Operators run side by side: each its own webhook port.
            (None, None) => cmd.arg("--webhook-addr").arg("127.0.0.1:0"),
        };
        cmd.arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--log-format")
            .arg("text")
            // Certificates in the test's namespace, deleted with it.
            .arg("--webhook-secret")
            .arg(format!(
                "{}/modelservice-operator-webhook-certs",
                self.env.namespace
            ))
            .args(&self.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", std::env::var("HOME").unwrap_or_default())
            .env("KUBECONFIG", &self.env.kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("E2E_OPERATOR_LOG")
                    .unwrap_or_else(|_| "info,modelservice_operator=debug".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        let child = cmd.spawn().expect("start the operator binary");
        Operator { child, port, log }
    }
}

/// The operator binary, running.
pub struct Operator {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Operator {
    /// GET a path on the admin server: (status code, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    /// [`wait_for`], whose panic on a timeout carries this operator's log:
    /// what explains a change that was not acted on.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        match poll_for(timeout, f).await {
            Some(v) => v,
            None => panic!(
                "timed out after {timeout:?} waiting for {what}; log {}",
                self.log_tail()
            ),
        }
    }

    /// Waits until /readyz answers 200.
    pub async fn ready(&self) {
        let deadline = Instant::now() + CONVERGE;
        while self.get("/readyz").map(|r| r.0) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "the operator did not become ready; log:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status();
    }

    /// Waits for the process to exit.
    pub async fn exited(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "operator did not exit within {timeout:?}; log:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The operator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The end of the log, without colours, for a panic message: CI shows
    /// a failure's first and last lines, and what explains a stall is
    /// nearer the end.
    pub fn log_tail(&self) -> String {
        const LINES: usize = 60;
        let all = self.logs();
        let lines: Vec<&str> = all.lines().collect();
        let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
        let mut plain = String::with_capacity(tail.len());
        let mut chars = tail.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // An SGR sequence: ESC [ ... m
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                plain.push(c);
            }
        }
        format!(
            "(the last {} of {} lines, all in {})\n{plain}",
            LINES.min(lines.len()),
            lines.len(),
            self.log.display()
        )
    }

    /// Waits until `series` reads `value` on /metrics; on timeout the panic
    /// carries this operator's log, which is what explains a stall.
    pub async fn await_metric(&self, series: &str, value: f64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.metric(series) != Some(value) {
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {series} = {value}; log {}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of an unlabelled or fully-labelled sample on /metrics.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics")?;
        body.lines()
            .find(|l| l.split_whitespace().next() == Some(series))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub use fake_apiserver::localhost::{free_port, http_get};

/// An outage the API server recovers from by itself.
#[derive(Clone, Copy, Debug)]
pub enum Outage {
    /// kube-apiserver killed and started again (`restart --kill kube-apiserver`).
    ApiServer,
    /// etcd killed and started again under a running apiserver.
    Etcd,
}

impl Env {
    /// Causes `outage` and returns once the API server answers again; false
    /// (after saying why) where this back end cannot cause it. On a real
    /// cluster it needs `../shared/k8s` (the control plane that `up` made,
    /// found through `REALK8S_DIR`), so kind or a remote cluster skip it.
    pub async fn outage(&self, outage: Outage, test: &str) -> bool {
        match (&self.fake, outage) {
            // The fake has no etcd of its own: losing its storage looks to
            // a client like its restart (watches end, history compacted).
            (Some(fake), _) => {
                fake.restarted().await;
                true
            }
            (None, _) => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/k8s/restart");
                if std::env::var_os("REALK8S_DIR").is_none() || !script.exists() {
                    eprintln!(
                        "SKIPPED {test}: restarting the control plane needs ../shared/k8s (REALK8S_DIR)"
                    );
                    return false;
                }
                let component = match outage {
                    Outage::ApiServer => "kube-apiserver",
                    Outage::Etcd => "etcd",
                };
                let out = tokio::task::spawn_blocking(move || {
                    Command::new(&script).arg("--kill").arg(component).output()
                })
                .await
                .expect("the restart task")
                .expect("run ../shared/k8s/restart");
                assert!(
                    out.status.success(),
                    "restart {component} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                true
            }
        }
    }
}

impl Env {
    /// Runs `during` while the operator's watch of `resource` (a plural) is
    /// lost, so that it must relist afterwards: whatever `during` deleted
    /// is then simply missing from the list, and no event says it went. On
    /// the fake only that watch is lost (it ends, and its re-watch is held
    /// and then answered 410), so nothing else brings the operator round.
    /// A real cluster loses all its watches in an apiserver restart, and
    /// `during` runs as soon as the server answers, before the operator's
    /// next reconnect, which its backoff puts up to seconds later. False
    /// (after saying why) where this back end cannot cause the loss.
    pub async fn watch_lost_during<F: Future<Output = ()>>(
        &self,
        resource: &str,
        test: &str,
        during: F,
    ) -> bool {
        if let Some(fake) = &self.fake {
            use fake_apiserver::Verb;
            fake.hold(Verb::Watch, resource);
            assert!(fake.expire_watches(resource), "no type {resource}");
            during.await;
            fake.release(Verb::Watch, resource);
            return true;
        }
        if !self.outage(Outage::ApiServer, test).await {
            return false;
        }
        during.await;
        true
    }
}

impl Env {
    /// A node joins the cluster and leaves again, as in a node pool that
    /// autoscales: the scheduler's message for a pending pod changes with
    /// the node count ("0/4 nodes are available", then "0/3"). On a real
    /// cluster the node is a bare Node object that no kubelet runs, tainted
    /// NoSchedule from its first moment: before, it was bare, and in the
    /// second before the node lifecycle controller tainted it not-ready the
    /// scheduler put other tests' pods on it (the emptiest node, while
    /// GPU fillers loaded the others); they never ran, and came back only
    /// when the pod garbage collector removed them, a minute later.
    pub async fn a_node_joins_and_leaves(&self, stay: Duration) {
        if let Some(sim) = &self.sim {
            sim.set_nodes(4);
            tokio::time::sleep(stay).await;
            sim.set_nodes(3);
            return;
        }
        use k8s_openapi::api::core::v1::Node;
        let name = format!("{}-extra", self.namespace);
        let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"modelservice.dev/e2e": "true"}},
            "spec": {"taints": [{"key": "modelservice.dev/e2e-extra", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"},
                       "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"}}}))
        .expect("node");
        let nodes = Api::<Node>::all(self.client.clone());
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("a node joins");
        tokio::time::sleep(stay).await;
        nodes
            .delete(&name, &DeleteParams::default())
            .await
            .expect("the node leaves");
    }
}
