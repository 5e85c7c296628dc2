//! Real pods as referee (issue 26): what the operator builds into a pod,
//! run by a real kubelet. On `../shared/k8s` with its real node
//! (`MODELSERVICE_E2E_REAL_NODE=1`, images from `tests/real-node/load-images`)
//! the pods run the fake model server (`tests/fake-model-server`); on the fake
//! API server the simulator plays that server's knobs as the real node
//! showed them. Podsim runs no process and reads no knob: on a real cluster
//! without the real node these scenarios are skipped.
//!
//! The scenarios are the few where a real pod can change the verdict:
//! - the startup probe and the preset's flags (a server that refuses them
//!   exits 2);
//! - a crash and a failed pull, named from what the kubelet really writes,
//!   and a crashing canary rolled back on that;
//! - a rollout that surges or replaces by the GPUs the device plugin really
//!   registered;
//! - a deletion that lets the requests in flight finish.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams};
use modelservice_operator::core::labels::INSTANCE_LABEL;
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, real_cluster, wait_for};
use crate::observe::*;
use crate::pod_http::call;

const MODEL: &str = "acme/tiny-chat-1b";
const PORT: u16 = 8000;
const REAL_NODE_LABEL: &str = "realnode/real";

/// Whether the pods run for real (the real node is up and its images loaded).
pub(crate) fn real_node() -> bool {
    real_cluster() && std::env::var("MODELSERVICE_E2E_REAL_NODE").is_ok_and(|v| v == "1")
}

/// Whether this back end can play the fake model server; prints a skip.
fn runs_here(test: &str) -> bool {
    if real_cluster() && !real_node() {
        eprintln!(
            "SKIPPED {test}: podsim runs no process; set MODELSERVICE_E2E_REAL_NODE=1 with the real node up"
        );
        return false;
    }
    true
}

fn image(flavor: &str) -> String {
    format!("modelservice.dev/fake-model-server:{flavor}")
}

/// A CPU-only model served by the fake model server of `flavor` with
/// `preset`, its knobs in `env`; on the real node, scheduled there.
fn served(flavor: &str, preset: &str, env: &[(&str, &str)]) -> Value {
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    let mut s = json!({"model": {"name": MODEL},
        "runtime": {"image": image(flavor), "preset": preset, "env": env},
        "resources": {"gpus": 0}, "replicas": 1});
    if real_node() {
        s["scheduling"] = json!({"nodeSelector": {REAL_NODE_LABEL: "true"},
            "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}]});
    }
    s
}

async fn pods_of(env: &Env, name: &str) -> Vec<Pod> {
    env.api::<Pod>()
        .list(&ListParams::default().labels(&format!("{INSTANCE_LABEL}={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn pod_ip(p: &Pod) -> Option<String> {
    p.status.as_ref()?.pod_ip.clone()
}

/// Seconds from the container's start to the pod's Ready condition.
fn start_to_ready(p: &Pod) -> Option<i64> {
    let s = p.status.as_ref()?;
    let started = s.container_statuses.as_ref()?.first()?;
    let started = started
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()?;
    let ready = s
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()?;
    Some(ready.0.as_second() - started.0.as_second())
}

fn degraded(ms: &modelservice_operator::api::ModelService) -> Option<(String, String)> {
    condition(ms, "Degraded").filter(|(s, _)| s == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_reach_the_server_and_ready_waits_for_its_probe() {
    if !runs_here("presets_reach_the_server_and_ready_waits_for_its_probe") {
        return;
    }
    let env = Env::new().await;
    let _op = env.operator().start();
    let load = [("FAKE_LOAD_SECONDS", "3")];
    // SGLang listens on loopback unless told: its preset says `--host`.
    let matching = [
        ("vllm", json!(["--model", MODEL, "--port", "8000"])),
        (
            "sglang",
            json!(["--model-path", MODEL, "--port", "8000", "--host", "0.0.0.0"]),
        ),
        ("tgi", json!(["--model-id", MODEL, "--port", "8000"])),
    ];
    for (flavor, _) in &matching {
        env.apply_ms_v1(flavor, served(flavor, flavor, &load)).await;
    }
    // TGI's flag given to vLLM: the server refuses it, as vLLM's parser does.
    env.apply_ms_v1("mismatch", served("vllm", "tgi", &load))
        .await;

    for (flavor, want_args) in &matching {
        let flavor = *flavor;
        wait_ready(&env, flavor).await;
        let pods = pods_of(&env, flavor).await;
        let [pod] = pods.as_slice() else {
            panic!("{flavor}: one pod, got {}", pods.len());
        };
        let waited = start_to_ready(pod).expect("a started, Ready pod");
        assert!(
            waited >= 3,
            "{flavor}: Ready {waited} s after its start, before the model loaded"
        );
        if !real_node() {
            continue;
        }
        // What the server got: the preset's flags and env vars, exactly.
        let ip = pod_ip(pod).expect("pod IP");
        let timeout = Duration::from_secs(5);
        let (code, info) = call(&ip, PORT, "GET", "/fake/info", None, timeout)
            .await
            .expect("/fake/info");
        assert_eq!(code, 200);
        assert_eq!(info["flavor"], flavor);
        assert_eq!(&info["args"], want_args);
        assert_eq!(
            info["env"],
            json!({"MODEL_NAME": MODEL, "PORT": "8000"}),
            "{flavor}"
        );
        let (_, models) = call(&ip, PORT, "GET", "/v1/models", None, timeout)
            .await
            .expect("/v1/models");
        assert_eq!(models["data"][0]["id"], MODEL);
        // Through the Service, as a client of the model would.
        let svc = env.api::<Service>().get(flavor).await.expect("the Service");
        let cluster_ip = svc.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
        // kube-proxy programs the Service a moment after the pod is Ready
        // (its EndpointSlice comes first): until then, connection refused,
        // or for a moment a server of another model answers, 404 (seen
        // once in CI, where earlier namespaces' Services were still going
        // away). A wrong answer that lasts fails on the timeout.
        let ask = json!({"model": MODEL, "prompt": "hi", "max_tokens": 4});
        let (code, done) = wait_for("a completion through the Service", CONVERGE, || {
            let (ip, ask) = (cluster_ip.clone(), ask.clone());
            async move {
                call(&ip, PORT, "POST", "/v1/completions", Some(&ask), timeout)
                    .await
                    .ok()
                    .filter(|(code, _)| *code == 200)
            }
        })
        .await;
        assert_eq!((code, &done["model"]), (200, &json!(MODEL)), "{done}");
    }

    let ms = wait_ms(
        &env,
        "mismatch",
        "the refused flags named",
        CONVERGE,
        |ms| degraded(ms).is_some_and(|(_, r)| r == "CrashLooping"),
    )
    .await;
    assert!(
        message(&ms, "Degraded").contains("(code 2)"),
        "{}",
        message(&ms, "Degraded")
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_a_failed_pull_are_named_and_a_crashing_canary_is_rolled_back() {
    if !runs_here("a_crash_and_a_failed_pull_are_named_and_a_crashing_canary_is_rolled_back") {
        return;
    }
    let env = Env::new().await;
    let _op = env.operator().start();
    let crash = [("FAKE_CRASH_CODE", "3"), ("FAKE_CRASH_AFTER_SECONDS", "1")];
    env.apply_ms_v1("crash", served("vllm", "vllm", &crash))
        .await;
    let mut pull = served("vllm", "vllm", &[]);
    pull["runtime"]["image"] = json!(image("does-not-exist"));
    env.apply_ms_v1("pull", pull).await;
    env.apply_ms_v1("stable", served("vllm", "vllm", &[])).await;

    let ms = wait_ms(&env, "crash", "the crash named", CONVERGE, |ms| {
        degraded(ms).is_some_and(|(_, r)| r == "CrashLooping")
    })
    .await;
    let crash_seen = Instant::now();
    assert!(
        message(&ms, "Degraded").contains("(code 3)")
            && message(&ms, "Degraded").contains(" restart"),
        "{}",
        message(&ms, "Degraded")
    );
    // The kubelet shows the loop as CrashLoopBackOff only now and then
    // (terminated, then running again, in between): the status holds.
    let holds = {
        let env_client = env.api::<modelservice_operator::api::ModelService>();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let until = crash_seen + Duration::from_secs(25);
            while Instant::now() < until {
                if let Ok(ms) = env_client.get("crash").await {
                    seen.push(degraded(&ms).map(|(_, r)| r));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            seen
        })
    };

    let ms = wait_ms(&env, "pull", "the failed pull named", CONVERGE, |ms| {
        degraded(ms).is_some_and(|(_, r)| r == "ImagePullFailed")
    })
    .await;
    assert!(
        message(&ms, "Degraded").contains("failed to pull and unpack image"),
        "the kubelet's own words: {}",
        message(&ms, "Degraded")
    );

    // A canary that crashes for real is rolled back; the stable pod serves.
    wait_ready(&env, "stable").await;
    let mut with_canary = served("vllm", "vllm", &[]);
    with_canary["rollout"] = json!({"canary": {"runtime": {"env": [
        {"name": "FAKE_CRASH_CODE", "value": "3"}]}, "replicas": 1, "weight": 50}});
    env.apply_ms_v1("stable", with_canary).await;
    let mut lowest_stable = i32::MAX;
    let deadline = Instant::now() + CONVERGE;
    let ms = loop {
        let ready = deployment(&env, "stable")
            .await
            .and_then(|d| d.status?.ready_replicas)
            .unwrap_or(0);
        lowest_stable = lowest_stable.min(ready);
        if let Some(ms) = get_ms(&env, "stable").await
            && condition(&ms, "CanaryHealthy") == Some(("False".into(), "CrashLooping".into()))
        {
            break ms;
        }
        assert!(Instant::now() < deadline, "the canary was not rolled back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let said = message(&ms, "CanaryHealthy");
    assert!(
        said.contains("(code 3)") && said.contains("rolled back"),
        "{said}"
    );
    wait_for("the canary at 0 replicas", CONVERGE, || async {
        (deployment(&env, "stable-canary").await?.spec.replicas == Some(0)).then_some(())
    })
    .await;
    assert_eq!(lowest_stable, 1, "the stable track lost its ready pod");

    let seen = holds.await.expect("the sampler");
    assert!(
        seen.len() > 20 && seen.iter().all(|r| r.as_deref() == Some("CrashLooping")),
        "Degraded left CrashLooping while the server kept crashing: {seen:?}"
    );
    env.finish().await;
}

/// What a rollout showed while it ran: the strategy it used, the fewest
/// ready pods, and the Progressing messages.
#[derive(Debug, Default)]
struct Rollout {
    max_surge: Option<String>,
    lowest_ready: i32,
    said: Vec<String>,
}

/// Changes `name`'s server args to `args` and samples until the new
/// template is rolled out and Ready.
async fn roll_out(env: &Env, name: &str, mut spec: Value, args: &[&str]) -> Rollout {
    spec["runtime"]["args"] = json!(args);
    env.apply_ms_v1(name, spec).await;
    let mut r = Rollout {
        lowest_ready: i32::MAX,
        ..Rollout::default()
    };
    let deadline = Instant::now() + CONVERGE;
    loop {
        assert!(Instant::now() < deadline, "the rollout of {name}: {r:?}");
        let (Some(d), Some(ms)) = (deployment(env, name).await, get_ms(env, name).await) else {
            continue;
        };
        let status = d.status.clone().unwrap_or_default();
        let new_template = d
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|p| p.containers[0].args.clone())
            .is_some_and(|a| a.ends_with(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
        if new_template {
            r.lowest_ready = r.lowest_ready.min(status.ready_replicas.unwrap_or(0));
            if let Some(surge) = d
                .spec
                .strategy
                .as_ref()
                .and_then(|s| s.rolling_update.as_ref()?.max_surge.clone())
            {
                r.max_surge = Some(match surge {
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => {
                        i.to_string()
                    }
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
                });
            }
            let said = message(&ms, "Progressing");
            if r.said.last() != Some(&said) {
                r.said.push(said);
            }
            let done = status.observed_generation == d.metadata.generation
                && status.updated_replicas == Some(1)
                && status.replicas == Some(1)
                && status.ready_replicas == Some(1);
            if done
                && observed_current(&ms)
                && condition(&ms, "Ready").is_some_and(|c| c.0 == "True")
            {
                return r;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_rollout_surges_or_replaces_by_the_gpus_the_node_really_has() {
    if !runs_here("a_gpu_rollout_surges_or_replaces_by_the_gpus_the_node_really_has") {
        return;
    }
    // The real node has 2 GPUs from its device plugin; the fake's one node
    // as many.
    let env = Env::with_shape(fake_apiserver::simulator::ClusterShape {
        nodes: 1,
        gpus_per_node: 2,
        ..Default::default()
    })
    .await;
    let _op = env.operator().start();
    let mut one_gpu = served("vllm", "vllm", &[]);
    one_gpu["resources"]["gpus"] = json!(1);
    if !real_node() {
        one_gpu["scheduling"] = json!({"nodeSelector": {"kubernetes.io/hostname": "node-0"}});
    }
    env.apply_ms_v1("model", one_gpu.clone()).await;
    wait_ready(&env, "model").await;

    // One GPU free: the rollout surges, and a ready pod serves throughout.
    let r = roll_out(&env, "model", one_gpu.clone(), &["--seed", "1"]).await;
    assert_eq!(r.max_surge.as_deref(), Some("1"), "{r:?}");
    assert_eq!(r.lowest_ready, 1, "{r:?}");
    assert!(r.said.iter().any(|s| s.contains("surging: node ")), "{r:?}");

    // Another model takes the last GPU: the next rollout replaces.
    env.apply_ms_v1("filler", one_gpu.clone()).await;
    wait_ready(&env, "filler").await;
    let r = roll_out(&env, "model", one_gpu, &["--seed", "2"]).await;
    assert_eq!(r.max_surge.as_deref(), Some("0"), "{r:?}");
    assert!(r.said.iter().any(|s| s.contains("replacing: ")), "{r:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_model_lets_its_requests_in_flight_finish() {
    if !real_node() {
        eprintln!(
            "SKIPPED deleting_a_model_lets_its_requests_in_flight_finish: it needs a server process (MODELSERVICE_E2E_REAL_NODE=1)"
        );
        return;
    }
    let env = Env::new().await;
    let _op = env.operator().start();
    env.apply_ms_v1(
        "drain",
        served("vllm", "vllm", &[("FAKE_TOKEN_MILLIS", "20")]),
    )
    .await;
    wait_ready(&env, "drain").await;
    let pods = pods_of(&env, "drain").await;
    let [pod] = pods.as_slice() else {
        panic!("one pod, got {}", pods.len());
    };
    let (pod_name, ip) = (
        pod.metadata.name.clone().expect("name"),
        pod_ip(pod).expect("pod IP"),
    );
    // A completion of 150 tokens at 20 ms each: 3 s in flight.
    let request = tokio::spawn(async move {
        call(
            &ip,
            PORT,
            "POST",
            "/v1/completions",
            Some(&json!({"model": MODEL, "prompt": "hi", "max_tokens": 150})),
            Duration::from_secs(30),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.api::<modelservice_operator::api::ModelService>()
        .delete("drain", &DeleteParams::default())
        .await
        .expect("delete the ModelService");
    // The pod's last word before it goes: how its server exited.
    let mut last_exit = None;
    let deadline = Instant::now() + CONVERGE;
    while let Ok(Some(p)) = env.api::<Pod>().get_opt(&pod_name).await {
        assert!(Instant::now() < deadline, "the pod did not go: {p:?}");
        if let Some(t) = p
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next())
            .and_then(|c| c.state?.terminated)
        {
            last_exit = Some((t.exit_code, t.reason));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, body) = request
        .await
        .expect("the request task")
        .expect("the request in flight was answered");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 150);
    if let Some(exit) = last_exit {
        assert_eq!(exit, (0, Some("Completed".into())), "the server's exit");
    }
    gone::<modelservice_operator::api::ModelService>(&env, "drain", "the ModelService").await;
    env.finish().await;
}
