//! Autoscaling on and off: the HPA appears and disappears, and while it
//! exists the operator never writes the Deployment's replica count.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hpa_owns_replicas_while_autoscaling_is_on() {
    let env = Env::new().await;
    let _op = env.operator().start();
    let mut spec = cpu_spec();
    spec["replicas"] = json!(1);
    env.apply_ms("auto", spec.clone()).await;
    wait_for("the Deployment", CONVERGE, || deployment(&env, "auto")).await;

    spec["autoscaling"] = json!({"minReplicas": 1, "maxReplicas": 4, "targetQueueLength": 3});
    env.apply_ms("auto", spec.clone()).await;
    let hpa: HorizontalPodAutoscaler = wait_for("the HPA", CONVERGE, || async {
        env.api::<HorizontalPodAutoscaler>()
            .get_opt("auto")
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(hpa.spec.scale_target_ref.name, "auto");
    assert_eq!(hpa.spec.max_replicas, 4);
    let metric = &hpa.spec.metrics.as_ref().expect("metrics")[0];
    assert_eq!(
        metric.pods.as_ref().map(|p| p.target.average_value.clone()),
        Some(Some(
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("3".into())
        ))
    );

    // Once autoscaling is on, the operator's applied Deployment drops replicas.
    wait_for(
        "the operator to give up spec.replicas",
        CONVERGE,
        || async {
            let d = deployment(&env, "auto").await?;
            (!replicas_owners(&d)
                .iter()
                .any(|m| m == "modelservice-operator"))
            .then_some(())
        },
    )
    .await;

    // The HPA controller scales to 3 through the scale subresource.
    let api = env.api::<Deployment>();
    api.patch_scale(
        "auto",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scale");
    // Give the operator several reconciles (each spec change and each child
    // event triggers one) and check it never fights the HPA.
    for i in 0..3 {
        let mut s = spec.clone();
        s["args"] = json!([format!("--seed={i}")]);
        env.apply_ms("auto", s).await;
        wait_ms(&env, "auto", "the spec change observed", CONVERGE, |_| true).await;
        let d = wait_for("the Deployment with the new args", CONVERGE, || async {
            let d = deployment(&env, "auto").await?;
            let args = d.spec.template.spec.as_ref()?.containers[0].args.clone()?;
            args.contains(&format!("--seed={i}")).then_some(d)
        })
        .await;
        assert_eq!(
            d.spec.replicas,
            Some(3),
            "the operator overwrote the HPA's replica count"
        );
        assert!(
            !replicas_owners(&d)
                .iter()
                .any(|m| m == "modelservice-operator")
        );
    }

    // Autoscaling off: the HPA goes, and spec.replicas is ours again.
    env.apply_ms("auto", spec_without_autoscaling(spec)).await;
    gone::<HorizontalPodAutoscaler>(&env, "auto", "the HPA to be deleted").await;
    wait_for("replicas back to the spec", CONVERGE, || async {
        (deployment(&env, "auto").await?.spec.replicas == Some(1)).then_some(())
    })
    .await;
    env.finish().await;
}

fn spec_without_autoscaling(mut spec: serde_json::Value) -> serde_json::Value {
    if let Some(m) = spec.as_object_mut() {
        m.remove("autoscaling");
    }
    spec
}

/// Turning autoscaling on hands the replica count over without a dip, and
/// turning it off gives it back to the spec. Before the fix, releasing
/// `spec.replicas` through server-side apply reset it to the default, 1, on
/// a real API server, and it stayed there until the HPA acted (never, with a
/// broken metrics pipeline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_autoscaling_on_and_off_never_dips_the_replica_count() {
    let env = Env::new().await;
    let _op = env.operator().start();
    let mut spec = cpu_spec();
    spec["replicas"] = json!(3);
    env.apply_ms("handover", spec.clone()).await;
    wait_for("3 replicas", CONVERGE, || async {
        (deployment(&env, "handover").await?.spec.replicas == Some(3)).then_some(())
    })
    .await;

    spec["autoscaling"] = json!({"minReplicas": 3, "maxReplicas": 6, "targetQueueLength": 5});
    env.apply_ms("handover", spec.clone()).await;
    // Sample the count until the operator has let go of the field, and a
    // while after: it must never drop below 3 on the way.
    let mut lowest = i32::MAX;
    let mut released_at = None;
    let deadline = std::time::Instant::now() + CONVERGE;
    while std::time::Instant::now() < deadline {
        if let Some(d) = deployment(&env, "handover").await {
            lowest = lowest.min(d.spec.replicas.unwrap_or(1));
            let ours = replicas_owners(&d)
                .iter()
                .any(|m| m == "modelservice-operator");
            if !ours && released_at.is_none() {
                released_at = Some(std::time::Instant::now());
            }
        }
        if released_at.is_some_and(|t| t.elapsed() > std::time::Duration::from_secs(3)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(
        released_at.is_some(),
        "the operator kept spec.replicas while autoscaling is on"
    );
    assert_eq!(
        lowest, 3,
        "the replica count dipped while autoscaling was turned on"
    );

    // Off again: the spec's count comes back and is ours.
    spec["replicas"] = json!(2);
    env.apply_ms("handover", spec_without_autoscaling(spec))
        .await;
    gone::<HorizontalPodAutoscaler>(&env, "handover", "the HPA to be deleted").await;
    wait_for(
        "replicas back to the spec, owned by the operator",
        CONVERGE,
        || async {
            let d = deployment(&env, "handover").await?;
            (d.spec.replicas == Some(2)
                && replicas_owners(&d)
                    .iter()
                    .any(|m| m == "modelservice-operator"))
            .then_some(())
        },
    )
    .await;
    env.finish().await;
}
