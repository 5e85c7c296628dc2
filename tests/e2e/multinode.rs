//! Models bigger than a node: with `parallelism.pipeline` above 1 each
//! replica is a group of pods on a LeaderWorkerSet, the Service reaches the
//! leaders only, status counts groups whose every member is ready and names
//! the member that blocks one, the autoscaler scales groups, and switching
//! between one pod and a group per replica never leaves the model without a
//! ready replica.
//!
//! No LWS controller runs in either back end: `lws::LwsController` does its
//! part. The API server checks every LeaderWorkerSet against the upstream
//! v0.10.0 CRD. The CRD-missing case is in `multinode_missing`, which runs
//! alone.

use std::time::Duration;

use fake_apiserver::simulator::ClusterShape;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, real_cluster, wait_for};
use crate::lws::{LwsController, lws_api};
use crate::observe::*;

/// The real cluster's shape (`../shared/k8s`: 3 nodes of 2 GPUs), for the fake too.
fn small_gpu_nodes() -> ClusterShape {
    ClusterShape {
        nodes: 3,
        gpus_per_node: 2,
        gpu_resource: "nvidia.com/gpu".into(),
    }
}

fn spec(pipeline: i32, gpus: i32) -> Value {
    json!({"model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
        "runtime": {"image": serving_image(), "preset": "vllm", "port": 8000},
        "resources": {"gpus": gpus}, "replicas": 1,
        "parallelism": {"pipeline": pipeline}})
}

async fn lws(env: &Env, name: &str) -> Option<Value> {
    lws_api(&env.client, &env.namespace)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|o| serde_json::to_value(o).ok())
}

/// The selector of the Service `name`, once it exists: a reconcile sends
/// its independent writes at once, so the LeaderWorkerSet can be there
/// before its Service is.
async fn selector(env: &Env, name: &str) -> Value {
    let s = wait_for(&format!("the Service {name}"), CONVERGE, || async {
        env.api::<Service>().get_opt(name).await.ok().flatten()
    })
    .await;
    serde_json::to_value(s.spec.and_then(|s| s.selector)).unwrap_or_default()
}

fn ready_replicas(ms: &modelservice_operator::api::ModelService) -> i32 {
    ms.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_model_runs_as_groups_ready_only_when_every_member_is() {
    let env = Env::with_shape(small_gpu_nodes()).await;
    env.install_lws_crd().await;
    let _op = env.operator().start();
    let name = "multi";
    env.apply_ms_v1(name, spec(2, 1)).await;

    // The groups: two pods each, the leader serving with both sizes, the
    // workers joining it, each pod with the GPU limit.
    let l = wait_for("the LeaderWorkerSet", CONVERGE, || lws(&env, name)).await;
    let t = &l["spec"]["leaderWorkerTemplate"];
    assert_eq!(t["size"], 2);
    assert_eq!(t["restartPolicy"], "RecreateGroupOnPodRestart");
    assert_eq!(l["spec"]["startupPolicy"], "LeaderCreated");
    let leader = &t["leaderTemplate"]["spec"]["containers"][0];
    let worker = &t["workerTemplate"]["spec"]["containers"][0];
    let args: Vec<&str> = leader["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for pair in [
        ["--tensor-parallel-size", "1"],
        ["--pipeline-parallel-size", "2"],
        ["--distributed-executor-backend", "ray"],
    ] {
        assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
    }
    assert!(
        worker["command"][2]
            .as_str()
            .is_some_and(|c| c.contains("ray start --address=\"$LWS_LEADER_ADDRESS:6379\"")),
        "{worker}"
    );
    for c in [leader, worker] {
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "1", "{c}");
    }
    assert!(
        worker.get("readinessProbe").is_none(),
        "workers serve no HTTP"
    );
    assert!(deployment(&env, name).await.is_none(), "no Deployment");
    assert_eq!(
        selector(&env, name).await["leaderworkerset.sigs.k8s.io/worker-index"],
        "0",
        "the Service selects leaders"
    );

    // Nothing runs until the LWS controller acts: not Ready.
    let ms = wait_ms(&env, name, "a status", CONVERGE, |_| true).await;
    assert_ne!(condition(&ms, "Ready").map(|c| c.0), Some("True".into()));

    let _lws = LwsController::start(&env);
    let ms = wait_ready(&env, name).await;
    assert_eq!(ready_replicas(&ms), 1);
    assert_eq!(message(&ms, "Ready"), "1/1 replicas ready");

    // Four pods of 2 GPUs on three nodes of 2: one member waits, so its
    // group is not ready, and status names that member.
    env.apply_ms_v1(name, spec(4, 2)).await;
    let ms = wait_ms(&env, name, "InsufficientGPU", CONVERGE, |ms| {
        condition(ms, "Ready") == Some(("False".into(), "InsufficientGPU".into()))
    })
    .await;
    let m = message(&ms, "Ready");
    assert!(
        m.contains(" of group 0: no node has 2 free nvidia.com/gpu"),
        "{m}"
    );
    if !real_cluster() {
        // The fake places pods in name order: the last worker waits.
        assert!(m.starts_with("worker 3 of group 0: "), "{m}");
    }
    assert_eq!(ready_replicas(&ms), 0, "three of four members are no group");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autoscaler_scales_groups_and_the_operator_never_fights_it() {
    let env = Env::with_shape(small_gpu_nodes()).await;
    env.install_lws_crd().await;
    let _op = env.operator().start();
    let _lws = LwsController::start(&env);
    let name = "multi-hpa";
    let mut s = spec(2, 1);
    s["replicas"] = json!(2);
    env.apply_ms_v1(name, s.clone()).await;
    let ms = wait_ready(&env, name).await;
    assert_eq!(message(&ms, "Ready"), "2/2 replicas ready");

    // Autoscaling on: the HPA scales the LWS (in groups, through its scale
    // subresource), and the count it starts from is the one that runs, not
    // the CRD's default of 1.
    s["autoscaling"] = json!({"minReplicas": 1, "maxReplicas": 3, "targetQueueLength": 5});
    env.apply_ms_v1(name, s.clone()).await;
    let hpa = wait_for("the HPA", CONVERGE, || async {
        env.api::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>()
            .get_opt(name)
            .await
            .ok()
            .flatten()
    })
    .await;
    let target = hpa.spec.scale_target_ref;
    assert_eq!(
        (
            target.api_version.as_deref(),
            target.kind.as_str(),
            target.name.as_str()
        ),
        (Some("leaderworkerset.x-k8s.io/v1"), "LeaderWorkerSet", name)
    );
    let ms = wait_ms(&env, name, "the HPA observed", CONVERGE, |_| true).await;
    assert_eq!(message(&ms, "Ready"), "2/2 replicas ready", "no dip");
    let l = lws(&env, name).await.expect("the LeaderWorkerSet");
    assert_eq!(l["spec"]["replicas"], 2, "handed over, not dropped to 1");

    // The autoscaler asks for one group, as the HPA does.
    lws_api(&env.client, &env.namespace)
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale the LeaderWorkerSet");
    // A spec change makes the operator apply the LWS again: it leaves the
    // count alone.
    s["runtime"]["args"] = json!(["--max-model-len", "4096"]);
    env.apply_ms_v1(name, s).await;
    let ms = wait_ms(&env, name, "one ready group", CONVERGE, |ms| {
        message(ms, "Ready") == "1/1 replicas ready"
            && condition(ms, "Ready").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(ready_replicas(&ms), 1);
    let l = lws(&env, name).await.expect("the LeaderWorkerSet");
    assert_eq!(l["spec"]["replicas"], 1, "the autoscaler's count stays");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_between_one_pod_and_groups_keeps_a_ready_replica() {
    let env = Env::with_shape(small_gpu_nodes()).await;
    env.install_lws_crd().await;
    let _op = env.operator().start();
    let name = "switch";
    env.apply_ms_v1(name, spec(1, 1)).await;
    wait_ready(&env, name).await;
    assert!(lws(&env, name).await.is_none(), "pipeline 1: no groups");

    // To groups: the LWS comes, and the Deployment serves until its
    // groups are ready, the Service selecting both meanwhile.
    env.apply_ms_v1(name, spec(2, 1)).await;
    wait_for("the LeaderWorkerSet", CONVERGE, || lws(&env, name)).await;
    // (Written in v1alpha1, the change is in the kept-fields annotation
    // alone, which bumps no generation: wait for what status says.)
    wait_ms(&env, name, "the switch reported", CONVERGE, |ms| {
        condition(ms, "Ready").is_some_and(|c| c.0 == "False")
    })
    .await;
    let d = deployment(&env, name).await.expect("the Deployment stays");
    assert_eq!(d.status.and_then(|s| s.ready_replicas), Some(1));
    assert!(
        selector(&env, name).await["leaderworkerset.sigs.k8s.io/worker-index"].is_null(),
        "the Service still reaches the Deployment's pod"
    );
    let _lws = LwsController::start(&env);
    wait_for(
        "the Deployment to go once the groups are ready",
        CONVERGE,
        || async {
            let dep_ready = deployment(&env, name)
                .await
                .map(|d| d.status.and_then(|s| s.ready_replicas).unwrap_or(0));
            let groups_ready = lws(&env, name)
                .await
                .and_then(|l| l["status"]["readyReplicas"].as_i64())
                .unwrap_or(0);
            assert!(
                dep_ready.unwrap_or(0) >= 1 || groups_ready >= 1,
                "no ready replica: Deployment {dep_ready:?}, groups {groups_ready}"
            );
            dep_ready.is_none().then_some(())
        },
    )
    .await;
    wait_ready(&env, name).await;
    wait_for("the Service to select leaders", CONVERGE, || async {
        (selector(&env, name).await["leaderworkerset.sigs.k8s.io/worker-index"] == "0")
            .then_some(())
    })
    .await;

    // And back: the Deployment first, the groups once it is ready.
    env.apply_ms_v1(name, spec(1, 1)).await;
    wait_for(
        "the groups to go once the Deployment is ready",
        CONVERGE,
        || async {
            let dep_ready = deployment(&env, name)
                .await
                .and_then(|d| d.status.and_then(|s| s.ready_replicas))
                .unwrap_or(0);
            let groups = lws(&env, name).await;
            let groups_ready = groups
                .as_ref()
                .and_then(|l| l["status"]["readyReplicas"].as_i64())
                .unwrap_or(0);
            assert!(
                dep_ready >= 1 || groups_ready >= 1,
                "no ready replica: Deployment {dep_ready}, groups {groups_ready}"
            );
            groups.is_none().then_some(())
        },
    )
    .await;
    wait_ready(&env, name).await;
    assert!(selector(&env, name).await["leaderworkerset.sigs.k8s.io/worker-index"].is_null());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_keeps_starting_over_is_reported() {
    let env = Env::with_shape(small_gpu_nodes()).await;
    env.install_lws_crd().await;
    let _op = env.operator().start();
    let _lws = LwsController::start(&env);
    let name = "restarts";
    // Every member crashes: LWS recreates the group each time, so no pod
    // lives long enough to show a crash loop of its own.
    let mut s = spec(2, 1);
    s["runtime"]["image"] = json!("registry.example/crashloop:v1");
    s["runtime"]["preset"] = json!("none");
    env.apply_ms_v1(name, s).await;
    let ms = wait_ms(
        &env,
        name,
        "GroupRecreating",
        Duration::from_secs(120),
        |ms| condition(ms, "Ready") == Some(("False".into(), "GroupRecreating".into())),
    )
    .await;
    let m = message(&ms, "Degraded");
    assert!(m.starts_with("group 0 was recreated "), "{m}");
    assert!(m.contains("RecreateGroupOnPodRestart"), "{m}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_of_groups_is_a_second_lws_weighed_by_its_ready_groups() {
    let env = Env::with_shape(small_gpu_nodes()).await;
    env.install_lws_crd().await;
    env.install_gateway_crd().await;
    let _op = env.operator().start();
    let name = "multi-canary";
    let canary_image = format!("{}-canary", serving_image());
    let mut s = spec(2, 1);
    s["route"] = json!({"parentRefs": [{"name": "gateway"}]});
    s["rollout"] = json!({"canary": {"runtime": {"image": canary_image}, "weight": 25}});
    env.apply_ms_v1(name, s.clone()).await;

    // The canary: its own groups, of its own image, labelled as its track.
    let c = wait_for("the canary's LeaderWorkerSet", CONVERGE, || {
        lws(&env, "multi-canary-canary")
    })
    .await;
    let t = &c["spec"]["leaderWorkerTemplate"];
    assert_eq!(t["size"], 2);
    for role in ["leaderTemplate", "workerTemplate"] {
        assert_eq!(
            t[role]["spec"]["containers"][0]["image"],
            canary_image.as_str()
        );
        assert_eq!(
            t[role]["metadata"]["labels"]["serving.modelservice.dev/track"],
            "canary"
        );
    }
    let canary_selector = selector(&env, "multi-canary-canary").await;
    assert_eq!(canary_selector["serving.modelservice.dev/track"], "canary");
    assert_eq!(
        canary_selector["leaderworkerset.sigs.k8s.io/worker-index"],
        "0"
    );
    // No group is ready before the LWS controller acts: no weight to either
    // track beyond the stable one's.
    let b = wait_for("the route", CONVERGE, || async {
        let b = backends(&env, name).await;
        (!b.is_empty()).then_some(b)
    })
    .await;
    assert!(
        b.iter()
            .all(|(svc, w)| svc != "multi-canary-canary" || *w == 0),
        "weight to a canary with no ready group: {b:?}"
    );

    let _lws = LwsController::start(&env);
    wait_for(
        "the weights once both tracks have ready groups",
        CONVERGE,
        || async {
            let b = backends(&env, name).await;
            (b == [
                ("multi-canary-stable".to_string(), 75),
                ("multi-canary-canary".to_string(), 25),
            ])
            .then_some(())
        },
    )
    .await;
    // (CanaryHealthy is True while the canary starts, too: Serving is
    // the reason once its groups are ready.)
    wait_ms(&env, name, "the canary's group serving", CONVERGE, |ms| {
        condition(ms, "CanaryHealthy") == Some(("True".into(), "Serving".into()))
            && condition(ms, "Ready").is_some_and(|c| c.0 == "True")
            && ms
                .status
                .as_ref()
                .and_then(|s| s.tracks.as_ref())
                .is_some_and(|t| t.canary.ready_replicas == 1)
    })
    .await;

    // Promotion: the canary's image becomes the stable one; the canary's
    // groups go once the stable groups run it.
    s["runtime"]["image"] = json!(format!("{}-canary", serving_image()));
    s["rollout"] = json!({});
    env.apply_ms_v1(name, s).await;
    wait_for("the canary's groups to go", CONVERGE, || async {
        lws(&env, "multi-canary-canary")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let l = lws(&env, name).await.expect("the stable groups");
    assert_eq!(
        l["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"],
        format!("{}-canary", serving_image()).as_str()
    );
    wait_ready(&env, name).await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_surges_a_whole_group_only_when_all_of_it_fits() {
    let env = Env::with_shape(small_gpu_nodes()).await;
    env.install_lws_crd().await;
    let _op = env.operator().start();
    let _lws = LwsController::start(&env);
    let name = "multi-surge";
    let mut s = spec(2, 1);
    env.apply_ms_v1(name, s.clone()).await;
    wait_ready(&env, name).await;

    // A group of two pods of 1 GPU: four of the six GPUs are free, so a
    // whole second group fits, and the rollout never leaves no group ready.
    s["runtime"]["args"] = json!(["--max-model-len", "4096"]);
    env.apply_ms_v1(name, s.clone()).await;
    let decision = wait_for("the surge decision", CONVERGE, || async {
        let l = lws(&env, name).await?;
        l["metadata"]["annotations"][modelservice_operator::core::surge::ANNOTATION]
            .as_str()
            .map(|d| (d.to_string(), l["spec"]["rolloutStrategy"].clone()))
    })
    .await;
    let surged = decision.0.contains("surging 1 group of 2 pods");
    if !real_cluster() {
        assert!(surged, "{}", decision.0);
    }
    if surged {
        assert_eq!(
            decision.1["rollingUpdateConfiguration"],
            json!({"maxSurge": 1, "maxUnavailable": 0, "partition": 0})
                .as_object()
                .map(|o| {
                    let mut o = o.clone();
                    if !real_cluster() {
                        o.remove("partition");
                    }
                    Value::Object(o)
                })
                .unwrap_or_default()
        );
        wait_for(
            "the rollout, never without a ready group",
            CONVERGE,
            || async {
                let ms = get_ms(&env, name).await?;
                let l = lws(&env, name).await?;
                let ready = l["status"]["readyReplicas"].as_i64().unwrap_or(0);
                assert!(ready >= 1, "no ready group during a surge: {}", l["status"]);
                (observed_current(&ms) && condition(&ms, "Ready").is_some_and(|c| c.0 == "True"))
                    .then_some(())
            },
        )
        .await;
    }
    // Surging or replacing, the decision is stated in groups.
    let ms = wait_ready(&env, name).await;
    assert!(
        message(&ms, "Progressing").contains("group")
            && message(&ms, "Progressing").contains("2 pods"),
        "{}",
        message(&ms, "Progressing")
    );

    // Groups of two pods of 2 GPUs: once they run, one node's worth is
    // free, so another group does not fit: the rollout replaces, and says why.
    s["resources"]["gpus"] = json!(2);
    env.apply_ms_v1(name, s.clone()).await;
    wait_ready(&env, name).await;
    let decision_now = || async {
        let l = lws(&env, name).await?;
        l["metadata"]["annotations"][modelservice_operator::core::surge::ANNOTATION]
            .as_str()
            .map(str::to_string)
    };
    let before = decision_now().await;
    s["runtime"]["args"] = json!(["--max-model-len", "2048"]);
    env.apply_ms_v1(name, s).await;
    let d = wait_for("a new decision", CONVERGE, || async {
        decision_now().await.filter(|d| Some(d) != before.as_ref())
    })
    .await;
    if !real_cluster() {
        assert!(
            d.contains("replacing: a group is 2 pods of 2 nvidia.com/gpu"),
            "{d}"
        );
    }
    wait_ready(&env, name).await;
    env.finish().await;
}
