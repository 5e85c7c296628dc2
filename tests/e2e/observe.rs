//! Reading what the operator did, the way a user would: through the API.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use modelservice_operator::api::ModelService;

use crate::harness::{CONVERGE, Env, wait_for};

/// (status, reason) of a condition.
pub fn condition(ms: &ModelService, type_: &str) -> Option<(String, String)> {
    ms.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

pub fn message(ms: &ModelService, type_: &str) -> String {
    ms.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// True when status describes the current generation, conditions included.
pub fn observed_current(ms: &ModelService) -> bool {
    let generation = ms.metadata.generation;
    ms.status.as_ref().is_some_and(|s| {
        s.observed_generation == generation
            && !s.conditions.is_empty()
            && s.conditions
                .iter()
                .all(|c| c.observed_generation == generation)
    })
}

pub async fn get_ms(env: &Env, name: &str) -> Option<ModelService> {
    env.api::<ModelService>().get_opt(name).await.ok().flatten()
}

/// Waits until the current generation is observed and `pred` holds.
pub async fn wait_ms(
    env: &Env,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&ModelService) -> bool,
) -> ModelService {
    wait_for(what, timeout, || async {
        let ms = get_ms(env, name).await?;
        (observed_current(&ms) && pred(&ms)).then_some(ms)
    })
    .await
}

pub async fn wait_ready(env: &Env, name: &str) -> ModelService {
    wait_ms(
        env,
        name,
        &format!("{name} to be Ready"),
        crate::harness::CONVERGE,
        |ms| condition(ms, "Ready").is_some_and(|(s, _)| s == "True"),
    )
    .await
}

pub async fn deployment(env: &Env, name: &str) -> Option<Deployment> {
    env.api::<Deployment>().get_opt(name).await.ok().flatten()
}

/// The managers that own `spec.replicas` of a Deployment, from managedFields.
pub fn replicas_owners(d: &Deployment) -> Vec<String> {
    d.managed_fields()
        .iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .is_some_and(|spec| spec.get("f:replicas").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// A ModelService spec that needs no GPU and becomes ready on the simulator
/// (and, on a real cluster, with MODELSERVICE_E2E_SERVING_IMAGE).
pub fn cpu_spec() -> serde_json::Value {
    serde_json::json!({"model": "Qwen/Qwen2.5-0.5B-Instruct", "image": serving_image(), "gpus": 0})
}

pub fn serving_image() -> String {
    std::env::var("MODELSERVICE_E2E_SERVING_IMAGE")
        .unwrap_or_else(|_| "vllm/vllm-openai:v0.8.5".into())
}

/// Whether pods can become ready in this back end; prints why not.
pub fn pods_can_serve(test: &str) -> bool {
    if !crate::harness::real_cluster() || std::env::var("MODELSERVICE_E2E_SERVING_IMAGE").is_ok() {
        return true;
    }
    eprintln!(
        "SKIPPED part of {test}: readiness needs MODELSERVICE_E2E_SERVING_IMAGE on a real cluster"
    );
    false
}

/// Whether this scenario needs the fake's fault injection; prints a skip.
pub fn needs_fake(test: &str) -> bool {
    if crate::harness::real_cluster() {
        eprintln!("SKIPPED {test}: it needs the fake API server's fault injection and counters");
        return false;
    }
    true
}

/// What the operator binary sent (it alone talks to the fake over TCP; the
/// test and the simulator talk in-process).
pub fn operator_requests(env: &Env) -> fake_apiserver::RequestCounts {
    env.fake().tcp_counts()
}

/// The write requests in `counts`, as (verb, resource, count).
pub fn writes(counts: &fake_apiserver::RequestCounts) -> Vec<(String, String, u64)> {
    counts
        .iter()
        .filter(|((v, _), _)| v.is_write())
        .map(|((v, r), n)| (v.as_str().to_string(), r, n))
        .collect()
}

/// Every (verb, resource) in `counts`.
pub fn calls(counts: &fake_apiserver::RequestCounts) -> Vec<(String, String)> {
    counts
        .iter()
        .map(|((v, r), _)| (v.as_str().to_string(), r))
        .collect()
}

/// Waits until the object named `name` no longer exists.
pub async fn gone<K>(env: &Env, name: &str, what: &str)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    wait_for(what, CONVERGE, || async {
        env.api::<K>()
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
}

/// Whether this back end is a real API server; prints why the test needs one.
pub fn needs_real(test: &str, why: &str) -> bool {
    if !crate::harness::real_cluster() {
        eprintln!("SKIPPED {test}: {why}");
        return false;
    }
    true
}

/// Warning Events about the object `name` with `reason`.
pub async fn warnings(env: &Env, name: &str, reason: &str) -> usize {
    let lp = kube::api::ListParams::default();
    env.api::<k8s_openapi::api::events::v1::Event>()
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some(reason)
                        && e.type_.as_deref() == Some("Warning")
                })
                .count()
        })
        .unwrap_or(0)
}

/// The route's backends as (Service, weight).
pub async fn backends(env: &Env, name: &str) -> Vec<(String, i64)> {
    let Ok(Some(r)) = env.routes().get_opt(name).await else {
        return Vec::new();
    };
    r.data["spec"]["rules"][0]["backendRefs"]
        .as_array()
        .map(|b| {
            b.iter()
                .map(|b| {
                    (
                        b["name"].as_str().unwrap_or_default().to_string(),
                        b["weight"].as_i64().unwrap_or(1),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
