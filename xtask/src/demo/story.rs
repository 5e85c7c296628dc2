//! What the demo does to the cluster, step by step, and what it waits to
//! see after each: the samples converge (one model short of GPUs says so),
//! a node pool grows, a rollout, and a crashing canary rolled back.

use std::path::Path;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use modelservice_operator::api::ModelService;
use serde_json::{Value, json};

use super::cluster::{Cluster, NAMESPACE};
use super::screen::Screen;

/// Each step's time budget: the fake converges in seconds.
const STEP: Duration = Duration::from_secs(90);

/// The samples applied, from `config/samples`.
const SAMPLES: &[&str] = &[
    "minimal.yaml",
    "cpu-small.yaml",
    "canary-route.yaml",
    "autoscaled-multi-gpu.yaml",
];

fn condition(ms: &ModelService, type_: &str) -> Option<(String, String)> {
    ms.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn current(ms: &ModelService) -> bool {
    ms.status.as_ref().and_then(|s| s.observed_generation) == ms.metadata.generation
}

fn named<'a>(models: &'a [ModelService], name: &str) -> Option<&'a ModelService> {
    models
        .iter()
        .find(|m| m.metadata.name.as_deref() == Some(name))
}

fn ready(models: &[ModelService], name: &str) -> bool {
    named(models, name)
        .is_some_and(|m| current(m) && condition(m, "Ready").is_some_and(|(s, _)| s == "True"))
}

fn api(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        modelservice_operator::api::GROUP,
        modelservice_operator::api::STORAGE_VERSION,
        "ModelService",
    );
    Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk_with_plural(&gvk, "modelservices"),
    )
}

/// Applies `object` as `kubectl apply --server-side` would.
async fn apply(client: &Client, object: &Value) -> Result<(), String> {
    let name = object["metadata"]["name"]
        .as_str()
        .ok_or("a sample without a name")?;
    api(client)
        .patch(
            name,
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(object),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("applying {name}: {e}"))
}

fn sample(samples: &Path, file: &str) -> Result<Value, String> {
    let path = samples.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut v: Value =
        serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    v["metadata"]["namespace"] = json!(NAMESPACE);
    Ok(v)
}

fn say(screen: &Screen, text: &str) {
    println!("\n{:>5.1}s  ▶ {text}", screen.elapsed());
}

pub async fn run(cluster: &Cluster, screen: &mut Screen, samples: &Path) -> Result<(), String> {
    let client = &cluster.client;

    say(
        screen,
        "1/4 kubectl apply: four samples from config/samples on 3 nodes of 2 GPUs",
    );
    let mut big = Value::Null;
    for file in SAMPLES {
        let mut s = sample(samples, file)?;
        if *file == "autoscaled-multi-gpu.yaml" {
            // The simulated nodes carry no GPU product label.
            if let Some(sched) = s["spec"]["scheduling"].as_object_mut() {
                sched.remove("nodeSelector");
            }
            big = s.clone();
        }
        apply(client, &s).await?;
    }
    let big_name = big["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    screen
        .until(
            "three models Ready and the 4-GPU one short of GPUs",
            STEP,
            |m| {
                ["minimal", "qwen-cpu-small", "llama-8b"]
                    .iter()
                    .all(|n| ready(m, n))
                    && named(m, &big_name).is_some_and(|b| {
                        condition(b, "Degraded") == Some(("True".into(), "InsufficientGPU".into()))
                    })
            },
        )
        .await?;

    say(screen, "2/4 The node pool grows: 8 GPUs per node");
    cluster.sim.set_gpus_per_node(8);
    screen
        .until(&format!("{big_name} Ready"), STEP, |m| ready(m, &big_name))
        .await?;

    say(screen, "3/4 A new image for minimal: a rolling update");
    let mut minimal = sample(samples, "minimal.yaml")?;
    minimal["spec"]["runtime"]["image"] = json!("vllm/vllm-openai:v0.9.0");
    apply(client, &minimal).await?;
    screen
        .until("minimal rolled out", STEP, |m| ready(m, "minimal"))
        .await?;

    say(
        screen,
        "4/4 llama-8b's canary gets an image that crashes: it is rolled back",
    );
    let mut llama = sample(samples, "canary-route.yaml")?;
    llama["spec"]["rollout"]["canary"]["runtime"]["image"] =
        json!("vllm/vllm-openai:v0.9.0-crashloop");
    apply(client, &llama).await?;
    screen
        .until("the canary rolled back", STEP, |m| {
            named(m, "llama-8b").is_some_and(|l| {
                current(l)
                    && condition(l, "CanaryHealthy")
                        == Some(("False".into(), "CrashLooping".into()))
            })
        })
        .await?;
    Ok(())
}
