//! Deletion never hangs: the finalizer comes off and the children are collected.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::DeleteParams;
use modelservice_operator::api::ModelService;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_the_modelservice_and_collects_its_children() {
    let env = Env::new().await;
    let _op = env.operator().start();
    env.apply_ms("bye", cpu_spec()).await;
    wait_ms(&env, "bye", "the finalizer", CONVERGE, |ms| {
        !ms.metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .is_empty()
    })
    .await;
    wait_for("the Service", CONVERGE, || async {
        env.api::<Service>().get_opt("bye").await.ok().flatten()
    })
    .await;

    env.api::<ModelService>()
        .delete("bye", &DeleteParams::background())
        .await
        .expect("delete");
    gone::<ModelService>(&env, "bye", "the ModelService to be deleted").await;
    gone::<Deployment>(&env, "bye", "the Deployment to be collected").await;
    gone::<Service>(&env, "bye", "the Service to be collected").await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_completes_after_the_children_were_removed_by_hand() {
    let env = Env::new().await;
    let op = env.operator().start();
    env.apply_ms("manual", cpu_spec()).await;
    wait_ms(&env, "manual", "the finalizer", CONVERGE, |ms| {
        !ms.metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .is_empty()
    })
    .await;
    wait_for("the Deployment", CONVERGE, || deployment(&env, "manual")).await;

    // Stop the operator so it cannot recreate them, remove the children, then
    // delete the ModelService with a fresh operator.
    drop(op);
    env.api::<Deployment>()
        .delete("manual", &DeleteParams::background())
        .await
        .expect("delete deployment");
    env.api::<Service>()
        .delete("manual", &DeleteParams::background())
        .await
        .expect("delete service");
    env.api::<ModelService>()
        .delete("manual", &DeleteParams::background())
        .await
        .expect("delete");
    let _op = env.operator().start();
    gone::<ModelService>(&env, "manual", "the ModelService to be deleted").await;
    env.finish().await;
}
