//! What the demo shows while it runs: a row per ModelService when it
//! changes, a line per child that comes or goes, and, during a long wait,
//! a line every few seconds saying what it waits for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};
use modelservice_operator::api::ModelService;

use super::cluster::NAMESPACE;
use super::rows::{self, Row};

/// How often the cluster is read.
const TICK: Duration = Duration::from_millis(250);
/// How long a wait may go without a line.
const QUIET: Duration = Duration::from_secs(5);

pub struct Screen {
    client: Client,
    start: Instant,
    rows: BTreeMap<String, Row>,
    children: BTreeSet<String>,
}

impl Screen {
    pub fn new(client: Client) -> Self {
        println!("{}", rows::header());
        Self {
            client,
            start: Instant::now(),
            rows: BTreeMap::new(),
            children: BTreeSet::new(),
        }
    }

    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Reads the ModelServices and their children; prints what changed.
    pub async fn refresh(&mut self) -> Vec<ModelService> {
        let lp = ListParams::default();
        let models = Api::<ModelService>::namespaced(self.client.clone(), NAMESPACE)
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let mut children = BTreeSet::new();
        macro_rules! names {
            ($kind:ty, $label:expr) => {
                if let Ok(l) = Api::<$kind>::namespaced(self.client.clone(), NAMESPACE)
                    .list(&lp)
                    .await
                {
                    children.extend(
                        l.items
                            .iter()
                            .map(|o| format!("{} {}", $label, o.name_any())),
                    );
                }
            };
        }
        names!(Deployment, "Deployment");
        names!(Service, "Service");
        names!(HorizontalPodAutoscaler, "HorizontalPodAutoscaler");
        let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
        let routes: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            NAMESPACE,
            &ApiResource::from_gvk_with_plural(&gvk, "httproutes"),
        );
        if let Ok(l) = routes.list(&lp).await {
            children.extend(
                l.items
                    .iter()
                    .map(|o| format!("HTTPRoute {}", o.name_any())),
            );
        }
        let t = self.elapsed();
        for gone in self.children.difference(&children) {
            println!("{t:>5.1}s    - {gone}");
        }
        for new in children.difference(&self.children) {
            println!("{t:>5.1}s    + {new}");
        }
        self.children = children;
        for ms in &models {
            let r = rows::row(ms);
            if self.rows.get(&r.name) != Some(&r) {
                println!("{}", rows::line(t, &r));
                self.rows.insert(r.name.clone(), r);
            }
        }
        models
    }

    /// Refreshes until `done` holds for the ModelServices, or fails after
    /// `timeout` naming `what`.
    pub async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[ModelService]) -> bool,
    ) -> Result<(), String> {
        let since = Instant::now();
        let mut said = Instant::now();
        loop {
            let models = self.refresh().await;
            if done(&models) {
                return Ok(());
            }
            if since.elapsed() > timeout {
                return Err(format!("{what}: not within {timeout:?}"));
            }
            if said.elapsed() > QUIET {
                println!(
                    "{:>5.1}s    … waiting for {what} ({} s)",
                    self.elapsed(),
                    since.elapsed().as_secs()
                );
                said = Instant::now();
            }
            tokio::time::sleep(TICK).await;
        }
    }
}
