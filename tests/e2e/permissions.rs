//! Every API call the operator makes is granted by src/permissions.rs, the one
//! list the Helm chart's and config/rbac's Roles are generated from. The
//! operator runs as installed: all namespaces, leader election, its own
//! webhook certificate (the Secret), the CRD pointed at its webhook, and a
//! storage migration to do (the CRD and its status).

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use modelservice_operator::api::CRD_NAME;
use modelservice_operator::permissions;
use serde_json::json;

use crate::harness::{CONVERGE, Env, free_port, wait_for};
use crate::observe::*;

fn granted() -> BTreeSet<(String, String)> {
    // Every section counts: a call is granted if any of them grants it.
    // resourceNames are ignored here (calls are counted by verb and
    // resource); the unit tests of src/permissions.rs limit them to verbs
    // names can limit.
    permissions::sections()
        .iter()
        .flat_map(|section| &section.rules)
        .flat_map(|rule| {
            rule.verbs
                .iter()
                .map(|verb| (verb.as_str().to_string(), rule.resource.to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_the_operator_makes_is_granted() {
    if !needs_fake("every_call_the_operator_makes_is_granted") {
        return;
    }
    let env = Env::new().await;
    // Objects stored before the upgrade: the leader has a migration to run.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    crds.patch_status(
        CRD_NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"storedVersions": ["v1alpha1", "v1beta1", "v1"]}})),
    )
    .await
    .expect("storedVersions");
    let op = env
        .operator()
        .all_namespaces()
        .webhook_for_the_crd(free_port())
        .arg("--leader-elect")
        .arg("--lease-namespace")
        .arg(env.namespace.clone())
        .start();
    op.ready().await;
    // Exercise every path: create, autoscaling on and off, a failure event, deletion.
    let mut spec = cpu_spec();
    spec["autoscaling"] = json!({"maxReplicas": 2});
    env.apply_ms("rbac", spec).await;
    wait_ms(&env, "rbac", "status", CONVERGE, |_| true).await;
    env.apply_ms("rbac", cpu_spec()).await;
    wait_ready(&env, "rbac").await;
    // A v1 object surges by default: a new pod template reads the
    // cluster's free GPUs (nodes and pods, cluster-wide).
    let surging = |image: &str| json!({"model": {"name": "m"}, "runtime": {"image": image}, "resources": {"gpus": 1}});
    env.apply_ms_v1("rbac-surge", surging(&serving_image()))
        .await;
    wait_for("the Deployment", CONVERGE, || {
        deployment(&env, "rbac-surge")
    })
    .await;
    wait_ms(&env, "rbac-surge", "status", CONVERGE, |_| true).await;
    env.apply_ms_v1("rbac-surge", surging("vllm/vllm-openai:v0.9.0"))
        .await;
    wait_for("the surge decision", CONVERGE, || async {
        let d = deployment(&env, "rbac-surge").await?;
        d.metadata
            .annotations?
            .contains_key(modelservice_operator::core::surge::ANNOTATION)
            .then_some(())
    })
    .await;
    // An InferencePool route: the pool, its picker and the picker's Role
    // and RoleBinding; then without it, each of them deleted.
    env.install_gateway_crd().await;
    env.install_pool_crd().await;
    let pooled = |route: bool| {
        let mut s = json!({"model": {"name": "m"}, "runtime": {"image": serving_image()}, "resources": {"gpus": 0}});
        if route {
            s["route"] = json!({"parentRefs": [{"name": "gw"}], "backend": "InferencePool"});
        }
        s
    };
    env.apply_ms_v1("rbac-pool", pooled(true)).await;
    wait_for("the pool", CONVERGE, || async {
        env.pools().get_opt("rbac-pool").await.ok().flatten()
    })
    .await;
    env.apply_ms_v1("rbac-pool", pooled(false)).await;
    gone::<k8s_openapi::api::rbac::v1::Role>(&env, "rbac-pool-epp", "the pool's Role").await;
    // Groups: a LeaderWorkerSet in place of the Deployment, then back,
    // the Deployment deleted once the groups are ready and the reverse.
    env.install_lws_crd().await;
    let _lws = crate::lws::LwsController::start(&env);
    let grouped = |pipeline: i32| {
        json!({"model": {"name": "m"}, "runtime": {"image": serving_image()},
            "resources": {"gpus": 1}, "parallelism": {"pipeline": pipeline}})
    };
    env.apply_ms_v1("rbac-groups", grouped(1)).await;
    wait_ready(&env, "rbac-groups").await;
    env.apply_ms_v1("rbac-groups", grouped(2)).await;
    gone::<k8s_openapi::api::apps::v1::Deployment>(&env, "rbac-groups", "the Deployment").await;
    env.apply_ms_v1("rbac-groups", grouped(1)).await;
    wait_for("the groups to go", CONVERGE, || async {
        crate::lws::lws_api(&env.client, &env.namespace)
            .get_opt("rbac-groups")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // The weights cache: the claim and a Job, the progress from the Job's
    // log, a new revision (the old Job deleted), then no source (the
    // claim deleted).
    let cached = |rev: Option<&str>| {
        let mut s = json!({"model": {"name": "m"}, "runtime": {"image": serving_image()},
            "resources": {"gpus": 0}});
        if let Some(rev) = rev {
            s["model"]["source"] = json!({"uri": crate::weights::source(rev)});
            s["model"]["cache"] = json!({"size": "1Gi"});
        }
        s
    };
    env.apply_ms_v1("rbac-cached", cached(Some("rev1"))).await;
    let job = crate::weights::job_name(&crate::weights::the_job(&env, "rbac-cached", "rev1").await);
    let line = json!({"progress": {"doneBytes": 1, "totalBytes": 2, "bytesPerSecond": 1, "files": 0, "totalFiles": 1}});
    crate::weights::play_pod(&env, &job, &format!("{line}\n")).await;
    wait_ms(
        &env,
        "rbac-cached",
        "the download's progress",
        CONVERGE,
        |ms| {
            ms.status
                .as_ref()
                .and_then(|s| s.model.as_ref())
                .is_some_and(|m| m.done_bytes == Some(1))
        },
    )
    .await;
    let done = json!({"result": "Complete", "totalBytes": 2, "files": 1, "downloadedBytes": 2});
    crate::weights::play_end(&env, &job, done, false).await;
    wait_ready(&env, "rbac-cached").await;
    env.apply_ms_v1("rbac-cached", cached(Some("rev2"))).await;
    gone::<k8s_openapi::api::batch::v1::Job>(&env, &job, "rev1's Job").await;
    env.apply_ms_v1("rbac-cached", cached(None)).await;
    gone::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
        &env,
        "rbac-cached-weights",
        "the claim",
    )
    .await;

    env.api::<modelservice_operator::api::ModelService>()
        .delete("rbac", &Default::default())
        .await
        .expect("delete");
    wait_for("deletion", CONVERGE, || async {
        get_ms(&env, "rbac").await.is_none().then_some(())
    })
    .await;

    wait_for("the storage migration", CONVERGE, || async {
        let crd = crds.get(CRD_NAME).await.ok()?;
        (crd.status?.stored_versions? == ["v1"]).then_some(())
    })
    .await;

    let granted = granted();
    let used = calls(&operator_requests(&env));
    assert!(!used.is_empty());
    // The scenario reaches the webhook's and the migration's calls too.
    for (verb, resource) in [
        ("create", "secrets"),
        ("patch", "customresourcedefinitions"),
        ("patch", "customresourcedefinitions/status"),
        ("list", "nodes"),
        ("patch", "roles"),
        ("delete", "rolebindings"),
        ("patch", "inferencepools"),
        ("patch", "leaderworkersets"),
        ("delete", "leaderworkersets"),
        ("patch", "persistentvolumeclaims"),
        ("delete", "persistentvolumeclaims"),
        ("patch", "jobs"),
        ("delete", "jobs"),
        ("get", "pods/log"),
    ] {
        assert!(
            used.contains(&(verb.to_string(), resource.to_string())),
            "the operator made no {verb} {resource}: used {used:?}"
        );
    }
    let missing: Vec<_> = used.iter().filter(|c| !granted.contains(c)).collect();
    assert!(
        missing.is_empty(),
        "calls not granted in src/permissions.rs: {missing:?}\nused: {used:?}"
    );
}
