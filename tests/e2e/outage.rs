//! Outages of the control plane: an apiserver or etcd restart while the
//! operator runs. Afterwards every watched kind must be heard again within
//! seconds, without restarting the operator.
//!
//! On a real cluster these restart the shared control plane, which every
//! test running at the same time would feel, so CI runs this module on its
//! own (`outage::`, one thread) after the rest of the suite.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::DeleteParams;
use modelservice_operator::api::ModelService;
use serde_json::json;

use crate::harness::{CONVERGE, Env, Outage, wait_for};
use crate::observe::*;

/// How long after the server is back a change may take to be acted on.
/// Before the fix, nothing was acted on for minutes; the client-go operator
/// of the same contract takes about 2 s.
const HEARD: Duration = Duration::from_secs(20);

fn spec(arg: &str) -> serde_json::Value {
    let mut s = cpu_spec();
    s["args"] = json!([arg]);
    s["autoscaling"] = json!({"minReplicas": 1, "maxReplicas": 2, "targetQueueLength": 5});
    s
}

/// Waits until the child `name` of kind `K` exists with a uid other than `old`.
async fn recreated<K>(env: &Env, name: &str, old: &str, what: &str)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    wait_for(what, HEARD, || async {
        let k = env.api::<K>().get_opt(name).await.ok().flatten()?;
        (k.uid().as_deref() != Some(old)).then_some(())
    })
    .await;
}

async fn uid<K>(env: &Env, name: &str) -> String
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    wait_for("the child to exist", CONVERGE, || async {
        env.api::<K>().get_opt(name).await.ok().flatten()?.uid()
    })
    .await
}

async fn delete<K>(env: &Env, name: &str)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    env.api::<K>()
        .delete(name, &DeleteParams::background())
        .await
        .expect("delete a child by hand");
}

async fn has_arg(env: &Env, name: &str, arg: &str) -> Option<()> {
    let d = deployment(env, name).await?;
    d.spec
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .args
        .as_ref()?
        .iter()
        .any(|a| a == arg)
        .then_some(())
}

/// After `outage`, a change of every kind the operator watches is acted on:
/// a new and an updated ModelService (its own watch), a deleted Deployment,
/// Service and HPA (the child watches), and a deleted ModelService (the
/// finalizer).
async fn every_kind_is_heard_after(outage: Outage, test: &str) {
    let env = Env::new().await;
    let op = env.operator().start();
    op.ready().await;
    env.apply_ms("kept", spec("--before")).await;
    wait_for("kept's Deployment", CONVERGE, || {
        has_arg(&env, "kept", "--before")
    })
    .await;
    let hpa = uid::<HorizontalPodAutoscaler>(&env, "kept").await;
    let svc = uid::<Service>(&env, "kept").await;

    // Twice, and then a pause, as in the field: an upgrade restarts the
    // server more than once, and changes come while the watches reconnect.
    for _ in 0..2 {
        if !env.outage(outage, test).await {
            return;
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let back = std::time::Instant::now();

    env.apply_ms("new", cpu_spec()).await;
    wait_for(
        "a ModelService created after the outage to get its Deployment",
        HEARD,
        || deployment(&env, "new"),
    )
    .await;

    env.apply_ms("kept", spec("--after")).await;
    wait_for(
        "an update after the outage to reach the Deployment",
        HEARD,
        || has_arg(&env, "kept", "--after"),
    )
    .await;

    let dep = uid::<Deployment>(&env, "kept").await;
    delete::<Deployment>(&env, "kept").await;
    recreated::<Deployment>(&env, "kept", &dep, "the deleted Deployment to come back").await;
    delete::<Service>(&env, "kept").await;
    recreated::<Service>(&env, "kept", &svc, "the deleted Service to come back").await;
    delete::<HorizontalPodAutoscaler>(&env, "kept").await;
    recreated::<HorizontalPodAutoscaler>(&env, "kept", &hpa, "the deleted HPA to come back").await;

    env.api::<ModelService>()
        .delete("new", &DeleteParams::default())
        .await
        .expect("delete a ModelService");
    wait_for(
        "the deleted ModelService to be finalized and gone",
        HEARD,
        || async { get_ms(&env, "new").await.is_none().then_some(()) },
    )
    .await;

    wait_ms(&env, "kept", "kept's status to be current", HEARD, |_| true).await;
    eprintln!(
        "{test}: all six changes acted on {:?} after the outage",
        back.elapsed()
    );
    let expired = op
        .get("/metrics")
        .map(|(_, body)| {
            body.lines()
                .filter(|l| l.starts_with("modelservice_watch_errors_total{kind=\"expired\""))
                .count()
        })
        .unwrap_or(0);
    if matches!(outage, Outage::ApiServer) {
        // A restarted server's watch cache starts after our resourceVersions:
        // every re-watch gets 410 Gone and relists. That path must have run.
        assert!(
            expired > 0,
            "no watch expired (410) across the restart; log:\n{}",
            op.logs()
        );
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watched_kind_is_heard_after_an_apiserver_restart() {
    every_kind_is_heard_after(
        Outage::ApiServer,
        "every_watched_kind_is_heard_after_an_apiserver_restart",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watched_kind_is_heard_after_an_etcd_restart() {
    every_kind_is_heard_after(
        Outage::Etcd,
        "every_watched_kind_is_heard_after_an_etcd_restart",
    )
    .await;
}
