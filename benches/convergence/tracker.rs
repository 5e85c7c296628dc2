//! What a cluster run's namespace holds, followed by watches, for judging
//! convergence. Polling with lists cost more than it measured: at N = 10,000
//! each list of the ModelServices, Deployments and Services is tens of MB
//! that the API server encodes, four times a second, competing with the
//! writes under test (42.5 CPU-seconds of the harness alone in one cold
//! phase, against 4.8 for the bare writes, which never poll).

use std::fmt::Debug;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use modelservice_operator::api::ModelService;
use serde::de::DeserializeOwned;

pub struct Tracker {
    models: Store<ModelService>,
    deployments: Store<Deployment>,
    services: Store<Service>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A reflector of `K` in `namespace`, run by a task of its own.
fn follow<K>(client: &Client, namespace: &str) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let api = Api::<K>::namespaced(client.clone(), namespace);
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o| o.meta_mut().managed_fields = None)
        .reflect(writer);
    let task = tokio::spawn(stream.for_each(|_| async {}));
    (store, task)
}

impl Tracker {
    pub fn start(client: &Client, namespace: &str) -> Tracker {
        let (models, m) = follow(client, namespace);
        let (deployments, d) = follow(client, namespace);
        let (services, s) = follow(client, namespace);
        Tracker {
            models,
            deployments,
            services,
            tasks: vec![m, d, s],
        }
    }

    /// At least `n` ModelServices observed at `generation`, `n` Deployments
    /// whose server carries `arg`, and `n` Services, as last heard.
    pub fn converged(&self, n: usize, generation: i64, arg: &str) -> bool {
        let observed = self
            .models
            .state()
            .iter()
            .filter(|m| {
                m.metadata.generation == Some(generation)
                    && m.status.as_ref().and_then(|s| s.observed_generation) == Some(generation)
            })
            .count();
        if observed < n {
            return false;
        }
        let current = self
            .deployments
            .state()
            .iter()
            .filter(|d| {
                d.spec
                    .template
                    .spec
                    .as_ref()
                    .and_then(|p| p.containers.first())
                    .and_then(|c| c.args.as_ref())
                    .is_some_and(|a| a.iter().any(|x| x == arg))
            })
            .count();
        current >= n && self.services.state().len() >= n
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
