//! All three API versions at once: what one client writes in v1 survives
//! others that read and update the object in v1alpha1 and v1beta1, and the
//! children follow the v1 fields.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams, PostParams};
use modelservice_operator::core::convert::{FIELDS_ANNOTATION, V1, V1ALPHA1, V1BETA1};
use serde_json::json;

use crate::harness::{CONVERGE, Env, dynamic_ms_api, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_field_survives_v1alpha1_and_v1beta1_reads_and_updates_by_other_clients() {
    let env = Env::new().await;
    env.with_conversion().await;
    let _op = env.operator().start();
    let v1 = dynamic_ms_api(&env.client, &env.namespace, V1);
    let beta = dynamic_ms_api(&env.client, &env.namespace, V1BETA1);
    let alpha = dynamic_ms_api(&env.client, &env.namespace, V1ALPHA1);
    let ms: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": V1, "kind": "ModelService",
        "metadata": {"name": "sg", "namespace": env.namespace},
        "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
                 "runtime": {"image": serving_image(), "preset": "sglang", "port": 30000},
                 "resources": {"gpus": 0}}}))
    .expect("object");
    v1.patch(
        "sg",
        &PatchParams::apply("gitops").force(),
        &Patch::Apply(&ms),
    )
    .await
    .expect("apply v1");

    // Another client, written against v1alpha1, reads and updates it, and
    // like any client that updates, retries a conflict (the operator writes
    // the object too: its finalizer and status).
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut old = alpha.get("sg").await.expect("read as v1alpha1");
        let old_json = serde_json::to_value(&old).expect("json");
        assert_eq!(old_json["spec"]["model"], "Qwen/Qwen2.5-7B-Instruct");
        assert_eq!(old_json["spec"]["port"], 30000);
        assert!(
            old.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(FIELDS_ANNOTATION)),
            "the field v1alpha1 lacks waits in the annotation: {old_json}"
        );
        old.data["spec"]["args"] = json!(["--mem-fraction-static", "0.8"]);
        old.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("team".into(), "search".into());
        match alpha.replace("sg", &PostParams::default(), &old).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 20 => continue,
            Err(e) => panic!("update as v1alpha1: {e}"),
        }
    }

    // A third, written against v1beta1, does the same.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut old = beta.get("sg").await.expect("read as v1beta1");
        let old_json = serde_json::to_value(&old).expect("json");
        assert_eq!(
            old_json["spec"]["runtime"]["preset"], "sglang",
            "{old_json}"
        );
        assert!(
            old_json["metadata"]["annotations"]
                .get(FIELDS_ANNOTATION)
                .is_none(),
            "v1beta1 has a place for every v1 field: {old_json}"
        );
        old.data["spec"]["runtime"]["env"] = json!([{"name": "SGLANG_LOG", "value": "1"}]);
        match beta.replace("sg", &PostParams::default(), &old).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 20 => continue,
            Err(e) => panic!("update as v1beta1: {e}"),
        }
    }

    let now = serde_json::to_value(v1.get("sg").await.expect("read as v1")).expect("json");
    assert_eq!(now["spec"]["runtime"]["preset"], "sglang", "{now}");
    assert_eq!(
        now["spec"]["runtime"]["env"],
        json!([{"name": "SGLANG_LOG", "value": "1"}])
    );
    assert_eq!(
        now["spec"]["runtime"]["args"],
        json!(["--mem-fraction-static", "0.8"])
    );
    assert_eq!(now["metadata"]["labels"]["team"], "search");
    assert!(
        now["metadata"]["annotations"]
            .get(FIELDS_ANNOTATION)
            .is_none(),
        "never shown on a v1 read: {now}"
    );

    // And the operator serves it the sglang way.
    let dep = wait_for("the sglang Deployment", CONVERGE, || async {
        let d = env.api::<Deployment>().get_opt("sg").await.ok().flatten()?;
        let c = d.spec.template.spec.as_ref()?.containers.first()?.clone();
        (c.args
            .as_deref()
            .is_some_and(|a| a.last().map(String::as_str) == Some("0.8")))
        .then_some(c)
    })
    .await;
    assert_eq!(
        dep.args.as_deref().unwrap_or_default()[..4],
        [
            "--model-path",
            "Qwen/Qwen2.5-7B-Instruct",
            "--port",
            "30000"
        ]
    );
    let env_vars: Vec<(String, Option<String>)> = dep
        .env
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value))
        .collect();
    assert_eq!(
        env_vars[..2],
        [
            ("MODEL_NAME".into(), Some("Qwen/Qwen2.5-7B-Instruct".into())),
            ("PORT".into(), Some("30000".into()))
        ]
    );
    env.finish().await;
}

/// The kept-fields annotation is user input (issue 24). A v1alpha1 create
/// whose annotation breaks the v1 schema (5000 canary replicas) is
/// refused with the field named, and one that only tries to swap a field
/// v1alpha1 has (the image) gets the v1alpha1 spec's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_fields_annotation_neither_breaks_the_schema_nor_overrides_v1alpha1() {
    let env = Env::new().await;
    env.with_conversion().await;
    let _op = env.operator().start();
    let alpha = dynamic_ms_api(&env.client, &env.namespace, V1ALPHA1);
    let forged = |name: &str, kept: &str| -> kube::api::DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": V1ALPHA1, "kind": "ModelService",
            "metadata": {"name": name, "namespace": env.namespace,
                "annotations": {FIELDS_ANNOTATION: kept}},
            "spec": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "image": "good.example.com/x:1", "gpus": 0}}))
        .expect("object")
    };
    let create = async |name: &str, kept: &str| {
        alpha
            .create(&PostParams::default(), &forged(name, kept))
            .await
    };
    let refused = create(
        "forged",
        r#"{"runtime":{"image":"evil.example.com/x:1"},"rollout":{"canary":{"replicas":5000}}}"#,
    )
    .await
    .expect_err("a canary of 5000 replicas is refused");
    assert!(
        refused.to_string().contains("spec.rollout.canary.replicas"),
        "{refused}"
    );
    assert!(
        dynamic_ms_api(&env.client, &env.namespace, V1)
            .get_opt("forged")
            .await
            .expect("get")
            .is_none(),
        "nothing stored"
    );
    create(
        "swapped",
        r#"{"runtime":{"image":"evil.example.com/x:1"},"rollout":{"canary":{"replicas":2}}}"#,
    )
    .await
    .expect("within the schema, created");
    let d = wait_for("the Deployment", CONVERGE, || async {
        env.api::<Deployment>()
            .get_opt("swapped")
            .await
            .ok()
            .flatten()
    })
    .await;
    let image = d
        .spec
        .template
        .spec
        .and_then(|p| p.containers.first().and_then(|c| c.image.clone()));
    assert_eq!(image.as_deref(), Some("good.example.com/x:1"));
    env.finish().await;
}
