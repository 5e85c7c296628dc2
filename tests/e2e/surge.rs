//! `rollout.surge: Auto` against what the scheduler sees. With a free GPU a
//! one-replica rollout surges (maxSurge 1, maxUnavailable 0) and never has 0
//! ready pods; with the GPUs full it replaces (maxSurge 0, maxUnavailable 1),
//! and the Progressing condition says which and why.
//!
//! Each scenario pins its model to one node (nodeSelector on
//! `kubernetes.io/hostname`, a label podsim and the simulator both set), so
//! that on a shared real cluster what other tests run elsewhere changes
//! nothing, and it picks that node from what is free when it starts. The new
//! pod template is a new argument, not a new image: the scenarios must also
//! run where images really run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use modelservice_operator::api::ModelService;
use modelservice_operator::core::surge::{ANNOTATION, Decision};
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

const GPU: &str = "nvidia.com/gpu";

/// A one-replica, one-GPU model on `node`, with extra server `args`.
fn model(node: &str, args: &[&str]) -> Value {
    json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "runtime": {"image": serving_image(), "args": args},
        "resources": {"gpus": 1},
        "scheduling": {"nodeSelector": {"kubernetes.io/hostname": node}}})
}

/// Free GPUs per Ready, schedulable node, counted the test's own way
/// (allocatable minus the limits of the node's running pods), not with the
/// operator's code under test.
async fn free_gpus(env: &Env) -> BTreeMap<String, i64> {
    let nodes = Api::<Node>::all(env.client.clone())
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    let mut free: BTreeMap<String, i64> = nodes
        .items
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true))
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|n| {
            let gpus = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get(GPU))
                .and_then(|q| q.0.parse().ok())
                .unwrap_or(0);
            (n.name_any(), gpus)
        })
        .collect();
    let pods = Api::<Pod>::all(env.client.clone())
        .list(&ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"))
        .await
        .expect("list pods");
    for p in &pods.items {
        let Some(spec) = p.spec.as_ref() else {
            continue;
        };
        let Some(node) = spec.node_name.as_ref() else {
            continue;
        };
        let used: i64 = spec
            .containers
            .iter()
            .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(GPU))
            .filter_map(|q| q.0.parse::<i64>().ok())
            .sum();
        if let Some(f) = free.get_mut(node) {
            *f -= used;
        }
    }
    free
}

/// What the test saw while a rollout ran: the fewest ready pods of the
/// Deployment and every Progressing message of the ModelService. Watches,
/// not polls, so that a moment with no ready pod cannot slip between two
/// looks.
#[derive(Debug, Default)]
struct Seen {
    min_ready: Option<i32>,
    /// The fewest ready pods while the Deployment's strategy surged: its
    /// own events carry both, so no race between two watches decides it.
    min_ready_surging: Option<i32>,
    /// When the Deployment was first seen replacing (maxSurge 0) after it
    /// surged.
    replacing_at: Option<std::time::Instant>,
    /// The same moment, on the wall clock the scheduler stamps with.
    replacing_wall: Option<k8s_openapi::jiff::Timestamp>,
    progressing: Vec<String>,
    /// The fewest replicas the Deployment's spec asked for (a canary held
    /// at 0 for a moment shows here, however short the moment).
    min_spec_replicas: Option<i32>,
    /// The most ready pods it had.
    max_ready: i32,
}

struct Recorder {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    /// Starts watching the Deployment and ModelService named `name`; the
    /// first event of each is the state as it is now.
    async fn start(env: &Env, name: &str) -> Recorder {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let deployments = {
            let (seen, api, config) = (seen.clone(), env.api::<Deployment>(), by_name.clone());
            tokio::spawn(async move {
                let mut events = std::pin::pin!(crate::watching::events(api, config));
                while let Some(ev) = events.next().await {
                    let Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) = ev else {
                        continue;
                    };
                    let strategy = rolling(&d);
                    let wanted = d.spec.replicas;
                    // The API server leaves a count of 0 out.
                    let ready = d.status.map(|s| s.ready_replicas.unwrap_or(0));
                    if let (Some(ready), Ok(mut s)) = (ready, seen.lock()) {
                        if let Some(w) = wanted {
                            s.min_spec_replicas = Some(s.min_spec_replicas.map_or(w, |m| m.min(w)));
                        }
                        s.max_ready = s.max_ready.max(ready);
                        s.min_ready = Some(s.min_ready.map_or(ready, |m| m.min(ready)));
                        match strategy {
                            Some((IntOrString::Int(n), _)) if n > 0 => {
                                s.min_ready_surging =
                                    Some(s.min_ready_surging.map_or(ready, |m| m.min(ready)));
                            }
                            Some(_)
                                if s.replacing_at.is_none() && s.min_ready_surging.is_some() =>
                            {
                                s.replacing_at = Some(std::time::Instant::now());
                                s.replacing_wall = Some(k8s_openapi::jiff::Timestamp::now());
                            }
                            _ => {}
                        }
                    }
                }
            })
        };
        let models = {
            let (seen, api) = (seen.clone(), env.api::<ModelService>());
            tokio::spawn(async move {
                let mut events = std::pin::pin!(crate::watching::events(api, by_name));
                while let Some(ev) = events.next().await {
                    let Ok(watcher::Event::Apply(ms) | watcher::Event::InitApply(ms)) = ev else {
                        continue;
                    };
                    let m = message(&ms, "Progressing");
                    if let Ok(mut s) = seen.lock()
                        && s.progressing.last() != Some(&m)
                    {
                        s.progressing.push(m);
                    }
                }
            })
        };
        let recorder = Recorder {
            seen,
            tasks: vec![deployments, models],
        };
        wait_for("the watches to start", CONVERGE, || async {
            recorder.with(|s| s.min_ready.is_some()).then_some(())
        })
        .await;
        recorder
    }

    fn with<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        let s = self.seen.lock().expect("recorder lock");
        f(&s)
    }

    /// Waits until a Progressing message containing `text` was seen.
    async fn said(&self, text: &str) -> String {
        wait_for(
            &format!("Progressing to say {text:?}"),
            CONVERGE,
            || async { self.with(|s| s.progressing.iter().find(|m| m.contains(text)).cloned()) },
        )
        .await
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Waits until the Deployment has rolled out its current template to its
/// one replica: observed, updated, the old pod gone, ready.
async fn rolled_out(env: &Env, name: &str) -> Deployment {
    wait_for("the rollout to complete", CONVERGE, || async {
        let d = deployment(env, name).await?;
        let s = d.status.as_ref()?;
        (s.observed_generation == d.metadata.generation
            && s.updated_replicas == Some(1)
            && s.replicas == Some(1)
            && s.ready_replicas == Some(1))
        .then_some(d)
    })
    .await
}

/// (maxSurge, maxUnavailable) of a Deployment.
fn rolling(d: &Deployment) -> Option<(IntOrString, IntOrString)> {
    let ru = d.spec.strategy.as_ref()?.rolling_update.as_ref()?;
    Some((ru.max_surge.clone()?, ru.max_unavailable.clone()?))
}

fn decision(d: &Deployment) -> Option<Decision> {
    Decision::decode(d.metadata.annotations.as_ref()?.get(ANNOTATION)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_free_gpu_a_one_replica_rollout_surges_and_always_has_a_ready_pod() {
    let test = "with_a_free_gpu_a_one_replica_rollout_surges_and_always_has_a_ready_pod";
    if !pods_can_serve(test) {
        return;
    }
    let env = Env::new().await;
    let op = env.operator().start();
    // The last node with room for two pods (the other scenario fills the first).
    let node = wait_for("a node with 2 free GPUs", CONVERGE, || async {
        let free = free_gpus(&env).await;
        free.iter()
            .rev()
            .find(|(_, f)| **f >= 2)
            .map(|(n, _)| n.clone())
    })
    .await;
    env.apply_ms_v1("surge", model(&node, &[])).await;
    wait_ready(&env, "surge").await;
    let first = rolled_out(&env, "surge").await;
    assert_eq!(
        decision(&first),
        None,
        "a new Deployment carries no decision: it rolls nothing out"
    );

    if env.fake.is_some() {
        bystanders(&env, 130).await;
    }
    let recorder = Recorder::start(&env, "surge").await;
    env.apply_ms_v1("surge", model(&node, &["--max-model-len", "4096"]))
        .await;
    let said = recorder.said("surging: node").await;
    eprintln!("the decision: {said}");
    assert!(
        said.contains(&format!("surging: node {node} has "))
            && said.contains(" free nvidia.com/gpu"),
        "{said}"
    );
    let d = rolled_out(&env, "surge").await;
    assert_eq!(
        recorder.with(|s| s.min_ready),
        Some(1),
        "the old pod served until the new one was ready: {:?}",
        recorder.with(|s| s.progressing.clone())
    );
    assert_eq!(
        rolling(&d),
        Some((IntOrString::Int(1), IntOrString::Int(0))),
        "surge: one extra pod, none unavailable"
    );
    let decided = decision(&d).expect("the decision on the Deployment");
    assert!(decided.surge, "{decided:?}");
    let ms = wait_ready(&env, "surge").await;
    assert_eq!(
        condition(&ms, "Progressing").map(|c| c.1),
        Some("RolloutComplete".into())
    );
    op.await_metric(
        "modelservice_surge_decisions_total{decision=\"surge\"}",
        1.0,
        CONVERGE,
    )
    .await;
    if env.fake.is_some() {
        // Reconciles after the decision reuse it: the nodes were read once.
        // (Pods are also listed in the namespace to diagnose the rollout.)
        let counts = operator_requests(&env);
        assert_eq!(
            counts.get(fake_apiserver::Verb::List, "nodes"),
            1,
            "{counts:?}"
        );
        // The cluster's pods came in pages of 100, not in one response.
        let largest = env.fake().largest_list("pods");
        assert!(
            (1..=100).contains(&largest),
            "a list of the cluster's pods held {largest}, more than a page"
        );
    }
    drop(recorder);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gpus_full_a_rollout_replaces_and_says_so() {
    let test = "with_the_gpus_full_a_rollout_replaces_and_says_so";
    if !pods_can_serve(test) {
        return;
    }
    let env = Env::new().await;
    let op = env.operator().start();
    let node = wait_for("a node with a free GPU", CONVERGE, || async {
        let free = free_gpus(&env).await;
        free.iter().find(|(_, f)| **f >= 1).map(|(n, _)| n.clone())
    })
    .await;
    env.apply_ms_v1("full", model(&node, &[])).await;
    wait_ready(&env, "full").await;
    rolled_out(&env, "full").await;

    fill(&env, &node).await;

    let recorder = Recorder::start(&env, "full").await;
    env.apply_ms_v1("full", model(&node, &["--max-model-len", "4096"]))
        .await;
    let said = recorder.said("replacing:").await;
    assert!(
        said.contains(
            "replacing: no schedulable node that matches the pods' nodeSelector and tolerations has 1 free nvidia.com/gpu"
        ),
        "{said}"
    );
    let d = rolled_out(&env, "full").await;
    assert_eq!(
        rolling(&d),
        Some((IntOrString::Int(0), IntOrString::Int(1))),
        "replace: the old pod goes first and frees its GPU"
    );
    assert_eq!(decision(&d).map(|d| d.surge), Some(false));
    // The simulator removes the old pod a tick before it makes the new one,
    // so there the recorder must see the gap surge avoids: the check that it
    // would see one. A real cluster's Deployment controller counts
    // ReplicaSet sizes, not pods, and may start the new pod while the old
    // one is still being deleted, so its status need not show the gap.
    if env.fake.is_some() {
        assert_eq!(
            recorder.with(|s| s.min_ready),
            Some(0),
            "replacing one replica leaves a moment without a ready pod"
        );
    }
    op.await_metric(
        "modelservice_surge_decisions_total{decision=\"replace\"}",
        1.0,
        CONVERGE,
    )
    .await;
    drop(recorder);
    // The GPUs go back at once, not when the namespace is gone.
    let _ = env
        .api::<Deployment>()
        .delete("gpu-filler", &DeleteParams::background())
        .await;
    let _ = env
        .api::<ModelService>()
        .delete("full", &DeleteParams::background())
        .await;
    env.finish().await;
}

/// Takes every free GPU of `node` with pods of this test's namespace only:
/// exactly what is free, so the model's own GPU is the one its new pod gets
/// once the old pod is gone. Topped up until nothing is free, in case
/// another test's pod left the node meanwhile.
async fn fill(env: &Env, node: &str) {
    let fillers = env.api::<Deployment>();
    let mut replicas = 0;
    loop {
        let free = free_gpus(env).await.get(node).copied().unwrap_or(0);
        if free <= 0 {
            break;
        }
        replicas += free;
        let filler = filler(node, replicas);
        fillers
            .patch(
                "gpu-filler",
                &PatchParams::apply("e2e-user").force(),
                &Patch::Apply(&filler),
            )
            .await
            .expect("apply the filler");
        wait_for("the filler pods to run", CONVERGE, || async {
            let d = deployment(env, "gpu-filler").await?;
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            (i64::from(ready) == replicas).then_some(())
        })
        .await;
    }
}

/// `n` pods of someone else's, bound to a node no kubelet runs: more of
/// the cluster's pods than one page of the operator's lists.
async fn bystanders(env: &Env, n: usize) {
    let pods = env.api::<k8s_openapi::api::core::v1::Pod>();
    for i in 0..n {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("bystander-{i}")},
            "spec": {"nodeName": "elsewhere",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))
        .expect("a pod");
        pods.create(&Default::default(), &pod)
            .await
            .expect("create a bystander pod");
    }
}

/// A Deployment of `replicas` pods that each hold one GPU on `node` and do
/// nothing else.
fn filler(node: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "gpu-filler"},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": "gpu-filler"}},
            "template": {"metadata": {"labels": {"app": "gpu-filler"}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "hold", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {GPU: "1"}}}]}}}})
}

/// Pauses or resumes the Deployment's rollout the way `kubectl rollout
/// pause` does: `spec.paused`, a field the operator never sets.
async fn pause(env: &Env, name: &str, paused: bool) {
    let patch = json!({"spec": {"paused": paused}});
    env.api::<Deployment>()
        .patch(
            name,
            &PatchParams {
                field_manager: Some("kubectl-rollout".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .expect("pause or resume the rollout");
}

/// A pod of the model that the scheduler cannot place for lack of GPUs.
async fn waiting_pod(
    env: &Env,
    name: &str,
) -> Option<(String, Option<k8s_openapi::jiff::Timestamp>)> {
    let pods = env
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={name}")))
        .await
        .ok()?;
    pods.items.iter().find_map(|p| {
        let c = p.status.as_ref()?.conditions.as_ref()?;
        c.iter()
            .find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.message
                        .as_deref()
                        .is_some_and(|m| m.contains("Insufficient nvidia.com/gpu"))
            })
            .map(|c| (p.name_any(), c.last_transition_time.as_ref().map(|t| t.0)))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surge_the_scheduler_refutes_switches_to_replace_and_completes() {
    let test = "a_surge_the_scheduler_refutes_switches_to_replace_and_completes";
    if !pods_can_serve(test) {
        return;
    }
    let env = Env::new().await;
    let op = env.operator().start();
    // A node with a GPU free beside the model's own. The middle one of
    // those: on a shared real cluster the other scenarios take the first
    // and the last.
    let node = wait_for("a node with 2 free GPUs", CONVERGE, || async {
        let free = free_gpus(&env).await;
        let roomy: Vec<&String> = free
            .iter()
            .filter(|(_, f)| **f >= 2)
            .map(|(n, _)| n)
            .collect();
        roomy.get(roomy.len() / 2).map(|n| (*n).clone())
    })
    .await;
    env.apply_ms_v1("refuted", model(&node, &[])).await;
    wait_ready(&env, "refuted").await;
    rolled_out(&env, "refuted").await;

    // The decision is taken with a GPU free; the rollout is paused, so the
    // surge pod is not made until the GPU is gone: the decision's read is
    // stale by then, as it is when another workload is faster.
    pause(&env, "refuted", true).await;
    let recorder = Recorder::start(&env, "refuted").await;
    env.apply_ms_v1("refuted", model(&node, &["--max-model-len", "4096"]))
        .await;
    let said = recorder.said("surging: node").await;
    assert!(
        said.contains(&format!("surging: node {node} has ")),
        "{said}"
    );
    fill(&env, &node).await;
    pause(&env, "refuted", false).await;

    let (pod, waits_since) = wait_for("the surge pod to wait for a GPU", CONVERGE, || async {
        waiting_pod(&env, "refuted").await
    })
    .await;
    let waiting_since = std::time::Instant::now();
    // The grace period (10 s by default) plus a few seconds.
    let refuted = wait_for(
        "the surge to be refuted",
        Duration::from_secs(10) + CONVERGE,
        || async {
            recorder.with(|s| {
                s.progressing
                    .iter()
                    .find(|m| m.contains("surge refuted by the scheduler"))
                    .cloned()
            })
        },
    )
    .await;
    eprintln!(
        "refuted {:.1} s after the test saw {pod} wait: {refuted}",
        waiting_since.elapsed().as_secs_f64()
    );
    assert!(
        refuted.contains(&format!(
            "surge refuted by the scheduler: pod {pod} waited "
        )) && refuted.contains("Insufficient nvidia.com/gpu")
            && refuted.ends_with("; replacing"),
        "{refuted}"
    );
    let d = rolled_out(&env, "refuted").await;
    if let Some(at) = recorder.with(|s| s.replacing_at) {
        eprintln!(
            "the Deployment replaced {:.1} s after the test saw the pod wait",
            at.duration_since(waiting_since).as_secs_f64()
        );
    }
    // From the end of the grace period (the scheduler's stamp, in whole
    // seconds, plus 10 s) to the switch the test's watch saw: the time from
    // refutation to switch, up to a second more than it really was.
    if let (Some(since), Some(wall)) = (waits_since, recorder.with(|s| s.replacing_wall)) {
        let ms = wall.as_millisecond() - since.as_millisecond() - 10_000;
        eprintln!(
            "from the grace period's end to the switch: {ms} ms (the scheduler stamps whole seconds)"
        );
    }
    assert_eq!(
        rolling(&d),
        Some((IntOrString::Int(0), IntOrString::Int(1))),
        "the same template now replaces"
    );
    let decided = decision(&d).expect("the decision on the Deployment");
    assert!(
        !decided.surge && refuted.ends_with(&decided.message),
        "the Deployment carries what Progressing says: {decided:?}"
    );
    assert_eq!(
        recorder.with(|s| s.min_ready_surging),
        Some(1),
        "the old pod served while the surge stood: {:?}",
        recorder.with(|s| s.progressing.clone())
    );
    op.await_metric(
        "modelservice_surge_decisions_total{decision=\"refuted\"}",
        1.0,
        CONVERGE,
    )
    .await;
    op.await_metric(
        "modelservice_surge_decisions_total{decision=\"surge\"}",
        1.0,
        CONVERGE,
    )
    .await;
    drop(recorder);
    let _ = env
        .api::<Deployment>()
        .delete("gpu-filler", &DeleteParams::background())
        .await;
    let _ = env
        .api::<ModelService>()
        .delete("refuted", &DeleteParams::background())
        .await;
    env.finish().await;
}

/// A canary beside `model(node, args)`: its own arguments, half the
/// traffic once ready, behind a route.
fn with_canary(node: &str, args: &[&str]) -> Value {
    let mut s = model(node, args);
    s["route"] = json!({"parentRefs": [{"name": "gateway"}], "path": "/v1"});
    s["rollout"] =
        json!({"canary": {"runtime": {"args": ["--canary"]}, "weight": 50, "replicas": 1}});
    s
}

/// The route's weight for `service`.
async fn weight(env: &Env, name: &str, service: &str) -> Option<i64> {
    let r = env.routes().get_opt(name).await.ok()??;
    r.data["spec"]["rules"][0]["backendRefs"]
        .as_array()?
        .iter()
        .find(|b| b["name"] == service)
        .and_then(|b| b["weight"].as_i64())
}

/// CI runs this on the fake API server only: on `../shared/k8s` a held
/// canary's waiting pod is sometimes bound to the GPU the stable track
/// frees before its ReplicaSet deletes it (see `.ci/run`), a race in the
/// operator's hold that this test, with its watches, catches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_waits_for_gpus_is_reported_kept_and_yields_to_the_stable_rollout() {
    let test = "a_canary_that_waits_for_gpus_is_reported_kept_and_yields_to_the_stable_rollout";
    if !pods_can_serve(test) {
        return;
    }
    let env = Env::new().await;
    env.install_gateway_crd().await;
    let op = env.operator().arg("--surge-grace").arg("3s").start();
    let node = wait_for("a node with a free GPU", CONVERGE, || async {
        let free = free_gpus(&env).await;
        let roomy: Vec<&String> = free
            .iter()
            .filter(|(_, f)| **f >= 1)
            .map(|(n, _)| n)
            .collect();
        roomy.get(roomy.len() / 2).map(|n| (*n).clone())
    })
    .await;
    let name = "gpuwait";
    env.apply_ms_v1(name, model(&node, &[])).await;
    wait_ready(&env, name).await;
    rolled_out(&env, name).await;
    fill(&env, &node).await;

    env.apply_ms_v1(name, with_canary(&node, &[])).await;
    let ms = wait_ms(
        &env,
        name,
        "CanaryHealthy InsufficientGPU",
        CONVERGE,
        |ms| condition(ms, "CanaryHealthy") == Some(("False".into(), "InsufficientGPU".into())),
    )
    .await;
    let said = message(&ms, "CanaryHealthy");
    assert!(
        said.contains("Insufficient nvidia.com/gpu") && said.contains("it is not rolled back"),
        "{said}"
    );
    assert_eq!(weight(&env, name, "gpuwait-canary").await, Some(0));
    assert_eq!(weight(&env, name, "gpuwait-stable").await, Some(100));
    // Past the grace period, with the stable track settled, it stays as
    // asked: waiting, not rolled back.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let canary = deployment(&env, "gpuwait-canary").await.expect("canary");
    assert_eq!(canary.spec.replicas, Some(1));
    assert!(
        !canary
            .annotations()
            .contains_key("serving.modelservice.dev/rolled-back"),
        "a canary waiting for GPUs was rolled back"
    );

    // The stable track rolls out (replacing: the node is full). The canary
    // gives way, so the GPU the old stable pod frees goes to its successor.
    // Watched, not polled: with podsim the hold can last less than a poll
    // (it was missed once that way).
    let canary_seen = Recorder::start(&env, "gpuwait-canary").await;
    env.apply_ms_v1(name, with_canary(&node, &["--max-model-len", "4096"]))
        .await;
    let deadline = std::time::Instant::now() + CONVERGE;
    loop {
        let done = deployment(&env, name).await.is_some_and(|d| {
            let args = d
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|p| p.containers[0].args.clone())
                .unwrap_or_default();
            d.status.as_ref().is_some_and(|s| {
                args.iter().any(|a| a == "4096")
                    && s.observed_generation == d.metadata.generation
                    && s.updated_replicas == Some(1)
                    && s.replicas == Some(1)
                    && s.ready_replicas == Some(1)
            })
        });
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stable rollout did not complete; log:\n{}",
            op.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (held, canary_ran) =
        canary_seen.with(|s| (s.min_spec_replicas == Some(0), s.max_ready > 0));
    assert!(
        held,
        "the canary was not held while the stable track rolled out"
    );
    assert!(
        !canary_ran,
        "the canary took the GPU the stable track freed"
    );
    // Done: the canary asks again, and waits again.
    wait_for("the canary back at 1 replica", CONVERGE, || async {
        let c = deployment(&env, "gpuwait-canary").await?;
        (c.spec.replicas == Some(1)).then_some(())
    })
    .await;
    wait_ms(
        &env,
        name,
        "CanaryHealthy InsufficientGPU again",
        CONVERGE,
        |ms| {
            condition(ms, "CanaryHealthy") == Some(("False".into(), "InsufficientGPU".into()))
                && !message(ms, "CanaryHealthy").contains("held at")
        },
    )
    .await;
    drop(op);
    let _ = env
        .api::<Deployment>()
        .delete("gpu-filler", &DeleteParams::background())
        .await;
    let _ = env
        .api::<ModelService>()
        .delete(name, &DeleteParams::background())
        .await;
    env.finish().await;
}
