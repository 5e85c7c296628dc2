//! Where the benchmark runs: the in-process fake API server (default), or
//! the cluster of the current kubeconfig with `MODELSERVICE_E2E=1`, like the
//! end-to-end suite. The phases and what they measure are the same on both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, RequestCounts};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use modelservice_operator::api::ModelService;
use modelservice_operator::metrics::Metrics;
use modelservice_operator::runtime::api_requests::CountRequests;
use serde_json::{Value, json};

use crate::measure::{ApiCounts, Requests, apiserver_requests, requests};
use crate::tracker::Tracker;

/// What each ModelService asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Variant {
    /// The fake API server's only variant: 1 GPU, a vLLM image (nothing runs).
    Fake,
    /// On a cluster: 1 GPU each, `registry.k8s.io/pause:3.10`, no node
    /// selector. With 3 nodes × 2 GPUs, 6 pods run and the rest stay Pending
    /// ("Insufficient nvidia.com/gpu").
    Gpu,
    /// On a cluster: no GPU, so the pods run, up to 3 nodes × 110 pods;
    /// beyond that Pending ("Too many pods").
    NoGpu,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Fake => "fake",
            Variant::Gpu => "gpu",
            Variant::NoGpu => "nogpu",
        }
    }
}

pub enum Backend {
    Fake {
        fake: FakeApiServer,
        _dir: tempfile::TempDir,
        kubeconfig: PathBuf,
    },
    Cluster {
        /// Every request of the harness goes through the operator's own
        /// counting layer, into `harness`.
        client: Client,
        harness: Arc<Metrics>,
        namespace: String,
        variant: Variant,
        /// The namespace as its watches last told it.
        tracker: Tracker,
    },
}

/// True when the benchmark should use the current kubeconfig's cluster.
pub fn real_cluster() -> bool {
    std::env::var("MODELSERVICE_E2E").is_ok_and(|v| v == "1")
}

impl Backend {
    /// A fresh fake, or a fresh namespace (with the CRD applied) on the
    /// cluster; `None` (with the reason on stderr) if the cluster cannot be
    /// reached: a later run must not panic while an earlier one's namespace
    /// is still to be deleted.
    pub async fn new(run: usize, variant: Variant) -> Option<Backend> {
        if real_cluster() {
            let harness = Arc::new(Metrics::new().ok()?);
            let client = match counted_client(harness.clone()).await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("MODELSERVICE_E2E=1 needs a working kubeconfig: {e}");
                    return None;
                }
            };
            let namespace = format!("ms-bench-{}-{run}", std::process::id());
            if let Err(e) = install_crd(&client).await {
                eprintln!("{e}");
                return None;
            }
            if let Err(e) = create_namespace(&client, &namespace).await {
                eprintln!("creating namespace {namespace}: {e}");
                return None;
            }
            let tracker = Tracker::start(&client, &namespace);
            return Some(Backend::Cluster {
                client,
                harness,
                namespace,
                variant,
                tracker,
            });
        }
        let fake = FakeApiServer::start().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        fake.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        create_namespace(&fake.client(), "bench")
            .await
            .expect("create namespace");
        Some(Backend::Fake {
            fake,
            _dir: dir,
            kubeconfig,
        })
    }

    /// The harness's own requests so far (on a cluster; empty on the fake,
    /// whose in-process client does not go through TCP).
    pub fn harness_requests(&self) -> Requests {
        match self {
            Backend::Fake { .. } => Requests::new(),
            Backend::Cluster { harness, .. } => requests(&harness.render()),
        }
    }

    /// The API server's `apiserver_request_total` (on a cluster), read
    /// through the harness's client, so the scrape is counted as its own.
    pub async fn apiserver_counts(&self) -> Option<ApiCounts> {
        let Backend::Cluster { client, .. } = self else {
            return None;
        };
        let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
        match client.request_text(req).await {
            Ok(text) => Some(apiserver_requests(&text)),
            Err(e) => {
                eprintln!("reading the API server's /metrics: {e}");
                None
            }
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Backend::Cluster { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Fake { .. } => "fake API server",
            Backend::Cluster { .. } => "cluster",
        }
    }

    pub fn client(&self) -> Client {
        match self {
            Backend::Fake { fake, .. } => fake.client(),
            Backend::Cluster { client, .. } => client.clone(),
        }
    }

    /// A client over the same kind of connection as the operator's: TCP to
    /// the fake (built from its kubeconfig), or the cluster's own client.
    pub async fn tcp_client(&self) -> Client {
        match self {
            Backend::Fake { kubeconfig, .. } => {
                let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
                let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .expect("config");
                Client::try_from(cfg).expect("client")
            }
            Backend::Cluster { client, .. } => client.clone(),
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Backend::Fake { .. } => "bench",
            Backend::Cluster { namespace, .. } => namespace,
        }
    }

    /// The kubeconfig the operator gets; `None` keeps the environment's.
    pub fn kubeconfig(&self) -> Option<&Path> {
        match self {
            Backend::Fake { kubeconfig, .. } => Some(kubeconfig),
            Backend::Cluster { .. } => None,
        }
    }

    /// What the fake server counted over TCP (only the operator uses TCP):
    /// an independent check of the operator's own request metric.
    pub fn server_counts(&self) -> Option<RequestCounts> {
        match self {
            Backend::Fake { fake, .. } => Some(fake.tcp_counts()),
            Backend::Cluster { .. } => None,
        }
    }

    /// The ModelService to create, by [`Variant`]. On a cluster the image is
    /// `registry.k8s.io/pause:3.10` (podsim runs it at once and never pulls
    /// anything); `gpu` asks 1 GPU, `nogpu` none; no node selector.
    pub fn model_service(&self, name: &str, arg: &str) -> Value {
        let spec = match self {
            Backend::Fake { .. } => json!({"model": {"name": "org/model"},
                "runtime": {"image": "vllm/vllm-openai:v0.8.5", "args": [arg]},
                "resources": {"gpus": 1}}),
            Backend::Cluster { variant, .. } => json!({"model": {"name": "org/model"},
                "runtime": {"image": "registry.k8s.io/pause:3.10", "args": [arg]},
                "resources": {"gpus": if *variant == Variant::NoGpu { 0 } else { 1 }}}),
        };
        json!({"apiVersion": modelservice_operator::core::convert::V1, "kind": "ModelService",
            "metadata": {"name": name, "namespace": self.namespace()}, "spec": spec})
    }

    /// Every ModelService observed at `generation`, with its Deployment
    /// carrying `arg` and its Service present.
    pub async fn converged(&self, n: usize, generation: i64, arg: &str) -> bool {
        let observed = |m: &Value| {
            m["metadata"]["generation"] == json!(generation)
                && m["status"]["observedGeneration"] == json!(generation)
        };
        let current = |d: &Value| {
            d["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == arg))
        };
        match self {
            Backend::Fake { fake, .. } => {
                fake.count_objects("serving.modelservice.dev", "modelservices", observed) >= n
                    && fake.count_objects("apps", "deployments", current) >= n
                    && fake.count_objects("", "services", |_| true) >= n
            }
            Backend::Cluster { tracker, .. } => tracker.converged(n, generation, arg),
        }
    }

    /// Every object of kind `K` in the namespace by name, with its
    /// `metadata.creationTimestamp` in milliseconds since the epoch (None
    /// where the server set none): metadata-only lists, 500 a page (the fake
    /// pages as a real API server does).
    pub async fn creation_times<K>(&self) -> Result<BTreeMap<String, Option<i64>>, kube::Error>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api = Api::<K>::namespaced(self.client(), self.namespace());
        let mut out = BTreeMap::new();
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(500);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = api.list_metadata(&lp).await?;
            for o in page.items {
                let created = o
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond());
                out.insert(o.metadata.name.unwrap_or_default(), created);
            }
            match page.metadata.continue_.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    pub async fn deployment_exists(&self, name: &str) -> bool {
        match self {
            Backend::Fake { fake, .. } => fake
                .get_object("apps", "deployments", "bench", name)
                .is_some(),
            Backend::Cluster {
                client, namespace, ..
            } => Api::<Deployment>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .is_some(),
        }
    }

    /// Deletes the benchmark's namespace on a cluster and waits until it is
    /// gone. Call it while the operator still runs: its finalizers would
    /// otherwise hold the namespace in Terminating.
    pub async fn finish(self) {
        let Backend::Cluster {
            client, namespace, ..
        } = self
        else {
            return;
        };
        // MODELSERVICE_BENCH_KEEP=1 leaves the namespace as it is: at
        // N = 10,000 its deletion (10,000 Deployments through the garbage
        // collector) takes longer than the runs; start a fresh cluster
        // between runs instead.
        if std::env::var_os("MODELSERVICE_BENCH_KEEP").is_some() {
            println!("(namespace {namespace} kept: MODELSERVICE_BENCH_KEEP)");
            return;
        }
        // Without an operator (the bare runs), a finalizer would hold the
        // namespace in Terminating: the bare client adds none, but strip any
        // (another operator on the cluster may have added one).
        let ms: Api<ModelService> = Api::namespaced(client.clone(), &namespace);
        let mut objects = 0;
        if let Ok(list) = ms.list_metadata(&ListParams::default()).await {
            objects = list.items.len();
            // 16 at a time: one by one, 10,000 patches take minutes.
            futures::stream::iter(list.items.into_iter().filter(|m| {
                m.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| !f.is_empty())
            }))
            .for_each_concurrent(16, |m| {
                let ms = ms.clone();
                async move {
                    let _ = ms
                        .patch(
                            m.metadata.name.as_deref().unwrap_or_default(),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                }
            })
            .await;
        }
        let api = Api::<Namespace>::all(client);
        let _ = api.delete(&namespace, &DeleteParams::background()).await;
        // The namespace controller deletes every object (at N = 10,000:
        // ModelServices, Deployments, ReplicaSets, Pods, Services, tens of
        // thousands): 5 minutes, or 90 ms per ModelService beyond that.
        let limit = namespace_deletion_limit(objects);
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if matches!(api.get_opt(&namespace).await, Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!(
            "namespace {namespace} is still there after {} minutes; delete it by hand",
            limit.as_secs() / 60
        );
    }
}

/// How long [`Backend::finish`] waits for a namespace with `objects`
/// ModelServices to go: 5 minutes, at N = 10,000 15.
fn namespace_deletion_limit(objects: usize) -> Duration {
    Duration::from_secs(300).max(Duration::from_millis(90) * objects as u32)
}

/// The kubeconfig's client, its requests counted by the operator's own
/// layer (`runtime::api_requests`) into `metrics`.
async fn counted_client(metrics: Arc<Metrics>) -> Result<Client, String> {
    let config = kube::Config::infer().await.map_err(|e| e.to_string())?;
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(|e| e.to_string())?
        .with_layer(&CountRequests::new(metrics))
        .build())
}

async fn create_namespace(client: &Client, name: &str) -> Result<(), kube::Error> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name,
        "labels": {"modelservice.dev/bench": "true"}}}))
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map(|_| ())
}

async fn install_crd(client: &Client) -> Result<(), String> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/modelservice.yaml"),
    )
    .map_err(|e| format!("crds/modelservice.yaml: {e}"))?;
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&text).map_err(|e| format!("crds/modelservice.yaml: {e}"))?;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    // A CRD already there is left as it is: whoever installed it (the e2e
    // suite, a Helm release) keeps its conversion webhook's address, which
    // the file's would clash with (a url and a service at once are invalid).
    let present = crds
        .get_opt("modelservices.serving.modelservice.dev")
        .await
        .map_err(|e| format!("reading the CRD: {e}"))?
        .is_some();
    if !present {
        crds.patch(
            "modelservices.serving.modelservice.dev",
            &PatchParams::apply("modelservice-bench").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|e| format!("installing the CRD: {e}"))?;
    }
    let api: Api<ModelService> = Api::all(client.clone());
    for _ in 0..300 {
        if api.list(&ListParams::default().limit(1)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err("the ModelService API is not served 30 s after applying the CRD".into())
}
