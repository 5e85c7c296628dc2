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

/// A child deleted before the operator's cache showed it must come back.
/// Before the fix the memo of our own write took "not in the cache" for "the
/// cache is behind", and about 1 in 40 such children stayed away for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_deleted_the_moment_they_appear_are_recreated() {
    use futures::StreamExt;
    use kube::ResourceExt;
    use kube::runtime::watcher;
    use std::collections::{HashMap, HashSet};

    const N: usize = 40;
    let env = Env::new().await;
    let op = env.operator().start();
    op.ready().await;
    let api = env.api::<Deployment>();
    // The first Deployment of every name is deleted as soon as it is seen.
    let deleter = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut deleted: HashMap<String, String> = HashMap::new();
            let mut events = std::pin::pin!(crate::watching::events(
                api.clone(),
                watcher::Config::default()
            ));
            while let Some(ev) = events.next().await {
                let Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) = ev else {
                    continue;
                };
                let (name, uid) = (d.name_any(), d.uid().unwrap_or_default());
                if let std::collections::hash_map::Entry::Vacant(first) = deleted.entry(name) {
                    let _ = api.delete(first.key(), &Default::default()).await;
                    first.insert(uid);
                    if deleted.len() == N {
                        return deleted;
                    }
                }
            }
            deleted
        })
    };
    let names: Vec<String> = (0..N).map(|i| format!("early-{i}")).collect();
    futures::future::join_all(names.iter().map(|n| env.apply_ms(n, cpu_spec()))).await;
    let deleted = tokio::time::timeout(CONVERGE, deleter)
        .await
        .expect("every first Deployment seen and deleted")
        .expect("the deleting task");
    wait_for(
        "every deleted Deployment to be recreated",
        CONVERGE,
        || async {
            let now: HashSet<String> = api
                .list(&Default::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|d| deleted.get(&d.name_any()) != d.uid().as_ref())
                .map(|d| d.name_any())
                .collect();
            names.iter().all(|n| now.contains(n)).then_some(())
        },
    )
    .await;
    env.finish().await;
}
