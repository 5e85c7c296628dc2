//! KEDA as the autoscaling engine: the ScaledObject replaces the HPA, the
//! switch between engines never leaves two autoscalers on one Deployment and
//! never dips the replicas, KEDA's own replica writes (down to zero) are never
//! reverted, and what KEDA says of itself reaches the status.
//!
//! There is no KEDA controller in either back end: the scenario writes the
//! replica count and the ScaledObject status as KEDA would.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, Operator, wait_for};
use crate::observe::*;

const PROMETHEUS: &str = "http://prometheus.monitoring:9090";

/// A CPU-only model in the v1 shape, with `autoscaling`.
pub fn keda_spec(replicas: i32, autoscaling: Value) -> Value {
    json!({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "runtime": {"image": serving_image()},
        "resources": {"gpus": 0}, "replicas": replicas, "autoscaling": autoscaling})
}

pub fn keda(min: i32, max: i32) -> Value {
    json!({"engine": "KEDA", "minReplicas": min, "maxReplicas": max, "targetQueueLength": 4,
        "keda": {"prometheus": {"address": PROMETHEUS}, "cooldownSeconds": 120}})
}

pub async fn scaled_object(env: &Env, name: &str) -> Option<DynamicObject> {
    env.scaled_objects().get_opt(name).await.ok().flatten()
}

async fn hpa(env: &Env, name: &str) -> Option<HorizontalPodAutoscaler> {
    env.api::<HorizontalPodAutoscaler>()
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// Samples the children until `done` holds and 3 s after: never two
/// autoscalers at once, and the lowest replica count seen.
async fn watch_switch(
    env: &Env,
    op: &Operator,
    name: &str,
    done: impl Fn(bool, bool) -> bool,
) -> i32 {
    let mut lowest = i32::MAX;
    let mut settled_at: Option<Instant> = None;
    let deadline = Instant::now() + CONVERGE;
    while Instant::now() < deadline {
        // Two reads are never one moment: the switch may fall between them,
        // so an HPA read before a ScaledObject read proves nothing alone.
        // One object seen (same uid) before and after the other was seen
        // proves both existed at once.
        let uid = |m: Option<kube::api::ObjectMeta>| m.and_then(|m| m.uid);
        let h1 = uid(hpa(env, name).await.map(|h| h.metadata));
        let s1 = uid(scaled_object(env, name).await.map(|s| s.metadata));
        let h2 = uid(hpa(env, name).await.map(|h| h.metadata));
        let s2 = uid(scaled_object(env, name).await.map(|s| s.metadata));
        let both = (h1.is_some() && h1 == h2 && s1.is_some())
            || (s1.is_some() && s1 == s2 && h2.is_some());
        assert!(
            !both,
            "an HPA and a ScaledObject scale {name} at once; log:\n{}",
            op.logs()
        );
        let (h, s) = (h2.is_some(), s2.is_some());
        if let Some(d) = deployment(env, name).await {
            lowest = lowest.min(d.spec.replicas.unwrap_or(1));
        }
        if done(h, s) {
            settled_at.get_or_insert_with(Instant::now);
        }
        if settled_at.is_some_and(|t| t.elapsed() > Duration::from_secs(3)) {
            return lowest;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the switch of {name} did not finish within {CONVERGE:?}");
}

/// Writes the ScaledObject's status as KEDA would.
async fn keda_reports(env: &Env, name: &str, ready: &str, active: &str, message: &str) {
    env.scaled_objects()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [
                {"type": "Ready", "status": ready, "reason": "ScaledObjectReady", "message": message},
                {"type": "Active", "status": active, "reason": "ScalerActive", "message": ""},
            ]}})),
        )
        .await
        .expect("write the ScaledObject status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keda_replaces_the_hpa_scales_to_zero_and_hands_back_without_a_fight() {
    let env = Env::new().await;
    env.install_keda_crd().await;
    let op = env.operator().arg("--discovery-interval").arg("1s").start();
    let name = "kedaswitch";

    // 3 replicas from the spec, then the HPA takes them over (neither
    // back end runs an HPA controller that would scale on a metric).
    let hpa_scaling = json!({"minReplicas": 3, "maxReplicas": 6, "targetQueueLength": 4});
    let mut fixed = keda_spec(3, Value::Null);
    if let Some(m) = fixed.as_object_mut() {
        m.remove("autoscaling");
    }
    env.apply_ms_v1(name, fixed).await;
    wait_for("3 replicas", CONVERGE, || async {
        (deployment(&env, name).await?.spec.replicas == Some(3)).then_some(())
    })
    .await;
    env.apply_ms_v1(name, keda_spec(3, hpa_scaling.clone()))
        .await;
    wait_for("the HPA", CONVERGE, || hpa(&env, name)).await;

    // HPA → KEDA: the HPA goes before the ScaledObject comes, at 3 replicas.
    env.apply_ms_v1(name, keda_spec(3, keda(0, 6))).await;
    let lowest = watch_switch(&env, &op, name, |h, s| !h && s).await;
    assert_eq!(lowest, 3, "the replicas dipped during the switch to KEDA");

    let so = scaled_object(&env, name).await.expect("the ScaledObject");
    let spec = &so.data["spec"];
    assert_eq!(spec["scaleTargetRef"]["name"], name);
    assert_eq!(spec["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        (
            spec["minReplicaCount"].as_i64(),
            spec["maxReplicaCount"].as_i64()
        ),
        (Some(0), Some(6))
    );
    assert_eq!(spec["cooldownPeriod"], 120);
    let trigger = &spec["triggers"][0];
    assert_eq!(trigger["type"], "prometheus");
    assert_eq!(trigger["metadata"]["serverAddress"], PROMETHEUS);
    assert_eq!(trigger["metadata"]["threshold"], "4");
    assert_eq!(
        trigger["metadata"]["query"],
        format!(
            "sum(vllm:num_requests_waiting{{namespace=\"{}\",pod=~\"{name}-[a-z0-9]{{1,10}}-[a-z0-9]{{5}}\"}})",
            env.namespace
        )
    );
    let owner = &so.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("ModelService", Some(true))
    );

    // KEDA says it works, and is idle.
    keda_reports(
        &env,
        name,
        "True",
        "False",
        "ScaledObject is defined correctly and is ready for scaling",
    )
    .await;
    let ms = wait_ms(&env, name, "status.autoscaler from KEDA", CONVERGE, |ms| {
        ms.status
            .as_ref()
            .and_then(|s| s.autoscaler.as_ref())
            .is_some_and(|a| {
                a.ready.as_deref() == Some("True") && a.active.as_deref() == Some("False")
            })
    })
    .await;
    assert_eq!(
        condition(&ms, "Degraded").map(|c| c.0),
        Some("False".into())
    );

    // KEDA scales to zero through the scale subresource, as its HPA does.
    env.api::<Deployment>()
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale to zero");
    let ms = wait_ms(
        &env,
        name,
        "Ready with reason ScaledToZero",
        CONVERGE,
        |ms| condition(ms, "Ready") == Some(("True".into(), "ScaledToZero".into())),
    )
    .await;
    assert!(
        ms.status.as_ref().and_then(|s| s.url.clone()).is_some(),
        "the URL stays"
    );
    // Several reconciles later (each spec change is one), still zero.
    for i in 0..3 {
        let mut spec = keda_spec(3, keda(0, 6));
        spec["runtime"]["args"] = json!([format!("--seed={i}")]);
        env.apply_ms_v1(name, spec).await;
        let d = wait_for("the Deployment with the new args", CONVERGE, || async {
            let d = deployment(&env, name).await?;
            let args = d.spec.template.spec.as_ref()?.containers[0].args.clone()?;
            args.contains(&format!("--seed={i}")).then_some(d)
        })
        .await;
        assert_eq!(
            d.spec.replicas,
            Some(0),
            "the operator reverted KEDA's replica count"
        );
    }

    // The last template change rolls out at zero replicas: Ready says
    // ScaledToZero again for the current generation.
    wait_ms(
        &env,
        name,
        "ScaledToZero for the last spec",
        CONVERGE,
        |ms| {
            ms.status.as_ref().and_then(|s| s.observed_generation) == ms.metadata.generation
                && condition(ms, "Ready") == Some(("True".into(), "ScaledToZero".into()))
        },
    )
    .await;

    // A trigger that fails is a Degraded reason, and Ready stays as it is.
    keda_reports(
        &env,
        name,
        "False",
        "False",
        "error querying prometheus: connection refused",
    )
    .await;
    let ms = wait_ms(&env, name, "Degraded AutoscalerNotReady", CONVERGE, |ms| {
        condition(ms, "Degraded") == Some(("True".into(), "AutoscalerNotReady".into()))
    })
    .await;
    assert!(
        message(&ms, "Degraded").contains("connection refused"),
        "{}",
        message(&ms, "Degraded")
    );
    assert_eq!(
        condition(&ms, "Ready"),
        Some(("True".into(), "ScaledToZero".into()))
    );

    // KEDA → HPA: the ScaledObject goes before the HPA comes. An HPA does
    // nothing to a Deployment at 0 (Kubernetes reads it as "disabled"), so
    // the model is woken to the HPA's minimum.
    env.apply_ms_v1(name, keda_spec(3, hpa_scaling)).await;
    watch_switch(&env, &op, name, |h, s| h && !s).await;
    wait_for("the HPA's minimum after KEDA's zero", CONVERGE, || async {
        (deployment(&env, name).await?.spec.replicas == Some(3)).then_some(())
    })
    .await;

    // Autoscaling off: no autoscaler, and the spec's count again.
    let mut off = keda_spec(2, Value::Null);
    if let Some(m) = off.as_object_mut() {
        m.remove("autoscaling");
    }
    env.apply_ms_v1(name, off).await;
    watch_switch(&env, &op, name, |h, s| !h && !s).await;
    wait_for("replicas back to the spec", CONVERGE, || async {
        (deployment(&env, name).await?.spec.replicas == Some(2)).then_some(())
    })
    .await;
    env.finish().await;
}

/// KEDA's query finds a ModelService's pods by name (issue 24): the pods
/// the ReplicaSet controller really names, for short and long names (the
/// API server cuts a pod's prefix to 58 characters), match their own
/// ModelService's pattern and no other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_finds_the_pods_of_short_and_long_names() {
    use k8s_openapi::api::core::v1::Pod;
    use modelservice_operator::core::keda::pod_pattern;
    let env = Env::new().await;
    let _op = env.operator().start();
    // Lengths around every cut: none, the hash cut, the dash cut, the name cut.
    let names: Vec<String> = [
        (5, 'a'),
        (46, 'b'),
        (47, 'c'),
        (56, 'd'),
        (57, 'e'),
        (58, 'f'),
        (63, 'g'),
    ]
    .iter()
    .map(|(n, c)| format!("k{}", c.to_string().repeat(n - 1)))
    .collect();
    for name in &names {
        env.apply_ms_v1(name, keda_spec(1, Value::Null)).await;
    }
    let pods_of = async |name: &str| {
        let lp =
            kube::api::ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"));
        env.api::<Pod>()
            .list(&lp)
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|p| p.metadata.name)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let matches = |pattern: &str, pod: &str| {
        regex::Regex::new(&format!("^(?:{pattern})$"))
            .expect("the pattern compiles")
            .is_match(pod)
    };
    for name in &names {
        let pods = wait_for("the pods", CONVERGE, || async {
            let p = pods_of(name).await;
            (!p.is_empty()).then_some(p)
        })
        .await;
        for pod in &pods {
            for other in &names {
                assert_eq!(
                    matches(&pod_pattern(other), pod),
                    other == name,
                    "pod {pod} of {name} against the pattern of {other}: {}",
                    pod_pattern(other)
                );
            }
        }
    }
    env.finish().await;
}
