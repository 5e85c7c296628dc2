//! Where the benchmark runs: the in-process fake API server (default), or
//! the cluster of the current kubeconfig with `MODELSERVICE_E2E=1`, like the
//! end-to-end suite. The phases and what they measure are the same on both.

use std::path::{Path, PathBuf};

use fake_apiserver::{FakeApiServer, RequestCounts};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use modelservice_operator::api::ModelService;
use serde_json::{Value, json};

pub enum Backend {
    Fake {
        fake: FakeApiServer,
        _dir: tempfile::TempDir,
        kubeconfig: PathBuf,
    },
    Cluster {
        client: Client,
        namespace: String,
    },
}

/// True when the benchmark should use the current kubeconfig's cluster.
pub fn real_cluster() -> bool {
    std::env::var("MODELSERVICE_E2E").is_ok_and(|v| v == "1")
}

impl Backend {
    /// A fresh fake, or a fresh namespace (with the CRD applied) on the cluster.
    pub async fn new(run: usize) -> Backend {
        if real_cluster() {
            let client = Client::try_default()
                .await
                .expect("MODELSERVICE_E2E=1 needs a working kubeconfig");
            let namespace = format!("ms-bench-{}-{run}", std::process::id());
            install_crd(&client).await;
            create_namespace(&client, &namespace).await;
            return Backend::Cluster { client, namespace };
        }
        let fake = FakeApiServer::start().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        fake.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        create_namespace(&fake.client(), "bench").await;
        Backend::Fake {
            fake,
            _dir: dir,
            kubeconfig,
        }
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

    /// The ModelService to create. On a cluster its pod asks for no GPU and
    /// is pinned to a node label no node has, so it stays Pending: a
    /// benchmark never takes GPUs, pulls an image or starts containers on a
    /// shared cluster, and each ModelService settles on one stable status
    /// (Unschedulable) instead of cycling through probe failures.
    pub fn model_service(&self, name: &str, arg: &str) -> Value {
        let spec = match self {
            Backend::Fake { .. } => json!({"model": {"name": "org/model"},
                "runtime": {"image": "vllm/vllm-openai:v0.8.5", "args": [arg]},
                "resources": {"gpus": 1}}),
            Backend::Cluster { .. } => json!({"model": {"name": "org/model"},
                "runtime": {"image": "registry.k8s.io/pause:3.10", "args": [arg]},
                "resources": {"gpus": 0},
                "scheduling": {"nodeSelector": {"modelservice.dev/benchmark": "no-node-has-this"}}}),
        };
        json!({"apiVersion": "serving.modelservice.dev/v1beta1", "kind": "ModelService",
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
            Backend::Cluster { client, namespace } => {
                let lp = ListParams::default();
                let count = |items: Vec<Value>, f: &dyn Fn(&Value) -> bool| {
                    items.iter().filter(|o| f(o)).count()
                };
                let ms = list_json::<ModelService>(client, namespace, &lp).await;
                if count(ms, &observed) < n {
                    return false;
                }
                let deps = list_json::<Deployment>(client, namespace, &lp).await;
                if count(deps, &current) < n {
                    return false;
                }
                list_json::<Service>(client, namespace, &lp).await.len() >= n
            }
        }
    }

    pub async fn deployment_exists(&self, name: &str) -> bool {
        match self {
            Backend::Fake { fake, .. } => fake
                .get_object("apps", "deployments", "bench", name)
                .is_some(),
            Backend::Cluster { client, namespace } => {
                Api::<Deployment>::namespaced(client.clone(), namespace)
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .is_some()
            }
        }
    }

    /// Deletes the benchmark's namespace on a cluster and waits until it is
    /// gone. Call it while the operator still runs: its finalizers would
    /// otherwise hold the namespace in Terminating.
    pub async fn finish(self) {
        let Backend::Cluster { client, namespace } = self else {
            return;
        };
        let api = Api::<Namespace>::all(client);
        let _ = api.delete(&namespace, &DeleteParams::background()).await;
        for _ in 0..600 {
            if matches!(api.get_opt(&namespace).await, Ok(None)) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        eprintln!("namespace {namespace} is still there after 5 minutes; delete it by hand");
    }
}

async fn list_json<K>(client: &Client, ns: &str, lp: &ListParams) -> Vec<Value>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .list(lp)
        .await
        .map(|l| {
            l.items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .collect()
        })
        .unwrap_or_default()
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name,
        "labels": {"modelservice.dev/bench": "true"}}}))
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

async fn install_crd(client: &Client) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/modelservice.yaml"),
    )
    .expect("crds/modelservice.yaml");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("crd parses");
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            "modelservices.serving.modelservice.dev",
            &PatchParams::apply("modelservice-bench").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("install CRD");
    let api: Api<ModelService> = Api::all(client.clone());
    for _ in 0..300 {
        if api.list(&ListParams::default().limit(1)).await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the ModelService API is not served 30 s after applying the CRD");
}
