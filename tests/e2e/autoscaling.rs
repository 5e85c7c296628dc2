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
