//! Server-side apply ownership: what we own is restored, what we do not own is left alone.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_of_an_owned_field_is_reverted_and_other_fields_survive() {
    let env = Env::new().await;
    let _op = env.operator().start();
    env.apply_ms("edit", cpu_spec()).await;
    wait_ms(&env, "edit", "first generation observed", CONVERGE, |_| {
        true
    })
    .await;
    wait_for("the Deployment", CONVERGE, || deployment(&env, "edit")).await;

    // A person edits the image (ours) and adds an annotation (not ours).
    let api = env.api::<Deployment>();
    let edit = json!({
        "metadata": {"annotations": {"team.example.com/owner": "alice"}},
        "spec": {"template": {"spec": {"containers": [{"name": "server", "image": "busybox:hand-edited"}]}}}
    });
    api.patch("edit", &PatchParams::apply("kubectl-edit").force(), &Patch::Apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "edit", "annotations": edit["metadata"]["annotations"]},
        "spec": edit["spec"]})))
    .await
    .expect("hand edit");

    let restored = wait_for("the image to be restored", CONVERGE, || async {
        let d = deployment(&env, "edit").await?;
        let image = d
            .spec
            .template
            .spec
            .as_ref()?
            .containers
            .first()?
            .image
            .clone()?;
        (image == serving_image()).then_some(d)
    })
    .await;
    assert_eq!(
        restored
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("team.example.com/owner"))
            .map(String::as_str),
        Some("alice"),
        "a field the operator does not set must survive"
    );
    env.finish().await;
}
