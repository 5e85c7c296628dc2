//! The version strategy: a canary beside the stable track, an HTTPRoute
//! that weighs only ready tracks, automatic rollback of a failing canary,
//! and a promotion that never drops capacity.
//!
//! There is no Gateway controller in either back end: the HTTPRoute is
//! checked as the operator writes it.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

const TRACK: &str = "serving.modelservice.dev/track";

/// A CPU-only model with a canary and a route, in the v1 shape.
fn spec(image: &str, replicas: i32, canary: Option<Value>) -> Value {
    let mut s = json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "runtime": {"image": image}, "resources": {"gpus": 0}, "replicas": replicas,
        "route": {"parentRefs": [{"name": "gateway"}], "path": "/v1"}});
    if let Some(c) = canary {
        s["rollout"] = json!({"canary": c});
    }
    s
}

/// Another serving image that becomes ready in both back ends.
fn canary_image() -> String {
    format!("{}-canary", serving_image())
}

async fn dep(env: &Env, name: &str) -> Option<Deployment> {
    env.api::<Deployment>().get_opt(name).await.ok().flatten()
}

fn ready(d: &Option<Deployment>) -> i32 {
    d.as_ref()
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

async fn svc(env: &Env, name: &str) -> Option<Service> {
    env.api::<Service>().get_opt(name).await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_serves_beside_the_stable_track_and_gets_weight_only_once_ready() {
    let env = Env::new().await;
    env.install_gateway_crd().await;
    let op = env.operator().start();
    let name = "beside";
    env.apply_ms_v1(name, spec(&serving_image(), 2, None)).await;
    wait_ready(&env, name).await;

    let t = Instant::now();
    let canary = json!({"runtime": {"image": canary_image()}, "replicas": 1, "weight": 20});
    env.apply_ms_v1(name, spec(&serving_image(), 2, Some(canary)))
        .await;
    // Until the canary has a ready pod, it gets no weight; once it has one,
    // the route carries the spec's weights.
    let weighted = wait_for("the weighted route", CONVERGE, || async {
        let canary_ready = ready(&dep(&env, "beside-canary").await);
        let b = backends(&env, name).await;
        let canary_weight = b
            .iter()
            .find(|(s, _)| s == "beside-canary")
            .map(|(_, w)| *w);
        if canary_weight.is_some_and(|w| w > 0) {
            assert!(
                canary_ready > 0 || ready(&dep(&env, "beside-canary").await) > 0,
                "weight {canary_weight:?} to a canary without a ready pod"
            );
        }
        (canary_weight == Some(20)).then_some(b)
    })
    .await;
    if pods_can_serve("canary weights") {
        eprintln!("canary spec to weighted route: {:?}", t.elapsed());
    }
    assert_eq!(
        weighted,
        [
            ("beside-stable".to_string(), 80),
            ("beside-canary".to_string(), 20)
        ]
    );

    // Both tracks, each with its own Service; the Service <name> reaches both.
    let c = dep(&env, "beside-canary").await.expect("canary Deployment");
    let labels = |d: &Deployment| {
        d.spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    };
    assert_eq!(labels(&c).get(TRACK).map(String::as_str), Some("canary"));
    let image = |d: &Deployment| {
        d.spec
            .template
            .spec
            .as_ref()
            .and_then(|p| p.containers[0].image.clone())
    };
    assert_eq!(image(&c), Some(canary_image()));
    let stable = dep(&env, name).await.expect("stable Deployment");
    assert_eq!(
        labels(&stable).get(TRACK).map(String::as_str),
        Some("stable")
    );
    assert_eq!(image(&stable), Some(serving_image()));
    let selector = |s: Option<Service>| {
        s.and_then(|s| s.spec)
            .and_then(|s| s.selector)
            .unwrap_or_default()
    };
    assert!(
        !selector(svc(&env, name).await).contains_key(TRACK),
        "<name> reaches both"
    );
    assert_eq!(
        selector(svc(&env, "beside-stable").await)
            .get(TRACK)
            .map(String::as_str),
        Some("stable")
    );
    assert_eq!(
        selector(svc(&env, "beside-canary").await)
            .get(TRACK)
            .map(String::as_str),
        Some("canary")
    );
    let ms = wait_ms(&env, name, "both tracks in status", CONVERGE, |ms| {
        ms.status
            .as_ref()
            .and_then(|s| s.tracks.as_ref())
            .is_some_and(|t| t.canary.ready_replicas == 1 && t.stable.ready_replicas == 2)
    })
    .await;
    let tracks = ms
        .status
        .as_ref()
        .and_then(|s| s.tracks.clone())
        .expect("tracks");
    assert_eq!(
        (tracks.stable.weight, tracks.canary.weight),
        (Some(80), Some(20))
    );
    assert_eq!(
        condition(&ms, "CanaryHealthy"),
        Some(("True".into(), "Serving".into()))
    );
    let route = ms
        .status
        .as_ref()
        .and_then(|s| s.route.clone())
        .expect("route status");
    assert_eq!(route.name, name);
    assert!(
        route
            .message
            .as_deref()
            .is_some_and(|m| m.contains("waiting for the Gateways")),
        "no Gateway controller, so not accepted yet: {route:?}"
    );
    // A Gateway controller accepts the route: status says so.
    env.routes()
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"status": {"parents": [{
                "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gateway"},
                "controllerName": "example.com/gateway-controller",
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                    "message": "", "observedGeneration": 1,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}})),
        )
        .await
        .expect("write the route's status as a Gateway controller");
    let ms = wait_ms(&env, name, "the route accepted", CONVERGE, |ms| {
        ms.status
            .as_ref()
            .and_then(|s| s.route.as_ref())
            .is_some_and(|r| r.accepted == Some(true))
    })
    .await;
    let route = ms
        .status
        .as_ref()
        .and_then(|s| s.route.clone())
        .expect("route status");
    assert_eq!(route.parents[0].parent, "gateway");
    assert_eq!(route.message, None, "accepted, weights as asked");

    // Removing the canary removes its children (a manual rollback).
    env.apply_ms_v1(name, spec(&serving_image(), 2, None)).await;
    gone::<Deployment>(&env, "beside-canary", "the canary Deployment").await;
    gone::<Service>(&env, "beside-canary", "the canary Service").await;
    gone::<Service>(&env, "beside-stable", "the stable Service").await;
    wait_for("the route to the Service", CONVERGE, || async {
        (backends(&env, name).await == [("beside".to_string(), 1)]).then_some(())
    })
    .await;
    let ms = wait_ms(&env, name, "no canary in status", CONVERGE, |ms| {
        ms.status.as_ref().is_some_and(|s| s.tracks.is_none())
    })
    .await;
    assert_eq!(condition(&ms, "CanaryHealthy"), None);
    drop(op);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_canary_is_rolled_back_by_itself_and_the_stable_track_keeps_every_pod() {
    let env = Env::new().await;
    env.install_gateway_crd().await;
    let op = env.operator().start();
    let name = "rollback";
    env.apply_ms_v1(name, spec(&serving_image(), 2, None)).await;
    wait_ready(&env, name).await;

    let t = Instant::now();
    let crashing = json!({"runtime": {"image": "registry.example/crashloop:1"}, "weight": 50});
    env.apply_ms_v1(name, spec(&serving_image(), 2, Some(crashing.clone())))
        .await;
    let mut lowest_stable = i32::MAX;
    let deadline = Instant::now() + Duration::from_secs(120);
    let ms = loop {
        lowest_stable = lowest_stable.min(ready(&dep(&env, name).await));
        if let Some(ms) = get_ms(&env, name).await
            && condition(&ms, "CanaryHealthy") == Some(("False".into(), "CrashLooping".into()))
        {
            break ms;
        }
        assert!(Instant::now() < deadline, "the canary was not rolled back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("crashing canary to rollback: {:?}", t.elapsed());
    assert!(
        message(&ms, "CanaryHealthy").contains("rolled back"),
        "{}",
        message(&ms, "CanaryHealthy")
    );
    wait_for("the canary at 0 replicas, weight 0", CONVERGE, || async {
        let c = dep(&env, "rollback-canary").await?;
        let b = backends(&env, name).await;
        (c.spec.replicas == Some(0)
            && b.contains(&("rollback-stable".to_string(), 100))
            && b.contains(&("rollback-canary".to_string(), 0)))
        .then_some(())
    })
    .await;
    // It stays rolled back, with its pods gone, and a weight change alone
    // does not bring it back.
    let mut spec2 = crashing.clone();
    spec2["weight"] = json!(30);
    env.apply_ms_v1(name, spec(&serving_image(), 2, Some(spec2)))
        .await;
    for _ in 0..30 {
        lowest_stable = lowest_stable.min(ready(&dep(&env, name).await));
        let c = dep(&env, "rollback-canary").await.expect("canary");
        assert_eq!(c.spec.replicas, Some(0), "the rollback held");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lowest_stable, 2, "the stable track lost a ready pod");
    let stable = dep(&env, name).await.expect("stable");
    assert_eq!(
        stable
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|p| p.containers[0].image.clone()),
        Some(serving_image()),
        "the stable track is untouched"
    );
    wait_for("the rollback Event", CONVERGE, || async {
        (warnings(&env, name, "CanaryRolledBack").await > 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        warnings(&env, name, "CanaryRolledBack").await,
        1,
        "announced once; log:\n{}",
        op.logs()
    );

    // A new canary template tries again.
    let good = json!({"runtime": {"image": canary_image()}, "weight": 30});
    env.apply_ms_v1(name, spec(&serving_image(), 2, Some(good)))
        .await;
    wait_ms(&env, name, "a healthy canary", CONVERGE, |ms| {
        condition(ms, "CanaryHealthy").is_some_and(|c| c.0 == "True")
    })
    .await;
    wait_for("the new canary to run", CONVERGE, || async {
        let c = dep(&env, "rollback-canary").await?;
        (c.spec.replicas == Some(1)).then_some(())
    })
    .await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_keeps_the_canary_until_the_stable_track_has_rolled_out() {
    let env = Env::new().await;
    env.install_gateway_crd().await;
    let _op = env.operator().start();
    let name = "promote";
    let canary = json!({"runtime": {"image": canary_image()}, "weight": 10});
    env.apply_ms_v1(name, spec(&serving_image(), 2, Some(canary)))
        .await;
    wait_for("both tracks ready", CONVERGE, || async {
        (ready(&dep(&env, name).await) == 2 && ready(&dep(&env, "promote-canary").await) == 1)
            .then_some(())
    })
    .await;

    // Promotion: the canary's image becomes the stable one; the canary goes.
    env.apply_ms_v1(name, spec(&canary_image(), 2, None)).await;
    let mut lowest = i32::MAX;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stable = dep(&env, name).await.expect("the stable Deployment");
        let c = dep(&env, "promote-canary").await;
        lowest = lowest.min(ready(&Some(stable.clone())) + ready(&c));
        if c.is_none() {
            // Gone only once the stable track runs the promoted template.
            let st = stable.status.clone().unwrap_or_default();
            let image = stable
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|p| p.containers[0].image.clone());
            assert_eq!(image, Some(canary_image()));
            assert!(
                st.updated_replicas == Some(2) && st.available_replicas >= Some(2),
                "the canary went before the stable rollout finished: {st:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the canary did not go");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        lowest >= 2,
        "ready pods fell to {lowest} during the promotion"
    );
    gone::<Service>(&env, "promote-canary", "the canary Service").await;
    wait_for("the route to the Service", CONVERGE, || async {
        (backends(&env, name).await == [("promote".to_string(), 1)]).then_some(())
    })
    .await;
    env.finish().await;
}
