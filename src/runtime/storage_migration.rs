//! Storage migration: once the CRD stores v1, the leader rewrites every
//! ModelService still stored in an older version (v1alpha1 or v1beta1) and
//! then drops those from the CRD's `status.storedVersions`.
//!
//! Why bother: until then a v1 read of an old object needs the conversion
//! webhook, so an operator outage would make `kubectl get modelservices`
//! fail; and an old version can never be removed from the CRD while etcd
//! may hold it. A write that changes nothing in meaning (an empty merge
//! patch) is enough: the API server decodes the object, encodes it in the
//! storage version, and since those bytes differ from the stored ones it
//! writes them. The spec is unchanged, so `metadata.generation` is too.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch};
use kube::{Api, Client};
use serde_json::json;
use tracing::{info, warn};

use super::shutdown::Shutdown;
use crate::api::{CRD_NAME, ModelService, STORAGE_VERSION};
use crate::controller::Leadership;
use crate::metrics::Metrics;

/// Objects rewritten at once: enough to finish thousands in seconds, few
/// enough not to crowd out reconciles on the API server.
const CONCURRENCY: usize = 8;
const PAGE: u32 = 500;

/// What the CRD says about storage, and what to do about it.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Only the storage version is stored: nothing to do.
    Done,
    /// The installed CRD does not store this operator's version yet (the
    /// operator was upgraded before the CRD): migrating now would rewrite
    /// objects in the old version.
    CrdTooOld { storage: Option<String> },
    /// Rewrite every object, then set storedVersions to the storage version.
    Migrate { stored: Vec<String> },
}

/// Decides from the CRD alone (pure).
pub fn plan(crd: &CustomResourceDefinition) -> Plan {
    let storage = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone());
    if storage.as_deref() != Some(STORAGE_VERSION) {
        return Plan::CrdTooOld { storage };
    }
    let stored = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    if stored.iter().all(|v| v == STORAGE_VERSION) {
        Plan::Done
    } else {
        Plan::Migrate { stored }
    }
}

/// Runs once this replica leads, until the migration is done or shutdown.
/// Failures retry with a growing pause (1 s to 1 min), never hot.
pub async fn run(
    client: Client,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) {
    let pause = |d: Duration| {
        let s = shutdown.clone();
        async move {
            tokio::select! {
                _ = tokio::time::sleep(d) => true,
                _ = s.wait() => false,
            }
        }
    };
    while !leadership.is_leader() {
        if !pause(Duration::from_secs(1)).await {
            return;
        }
    }
    let mut delay = Duration::from_secs(1);
    loop {
        match once(&client, &metrics).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => warn!(error = %e, retry_in = ?delay, "storage migration failed; retrying"),
        }
        if !pause(delay).await {
            return;
        }
        delay = (delay * 2).min(Duration::from_secs(60));
    }
}

/// One attempt: Ok(true) when nothing is left to do.
async fn once(client: &Client, metrics: &Metrics) -> Result<bool, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get(CRD_NAME).await?;
    let stored = match plan(&crd) {
        Plan::Done => {
            metrics.storage_migration(0, true);
            return Ok(true);
        }
        Plan::CrdTooOld { storage } => {
            warn!(
                storage_version = storage.as_deref().unwrap_or("<none>"),
                "the installed ModelService CRD does not store {STORAGE_VERSION}: apply this release's crds/modelservice.yaml; storage migration waits for it"
            );
            return Ok(false);
        }
        Plan::Migrate { stored } => stored,
    };
    info!(stored_versions = ?stored, "storage migration: rewriting every ModelService in {STORAGE_VERSION}");
    let api: Api<ModelService> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(PAGE);
    loop {
        let page = api.list_metadata(&lp).await?;
        names.extend(
            page.items
                .into_iter()
                .filter_map(|o| Some((o.metadata.namespace?, o.metadata.name?))),
        );
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
            _ => break,
        }
    }
    let total = names.len();
    metrics.storage_migration(total as i64, false);
    let done = futures::stream::iter(names)
        .map(|(ns, name)| {
            let api: Api<ModelService> = Api::namespaced(client.clone(), &ns);
            async move {
                match api
                    .patch_metadata(
                        &name,
                        &crate::controller::apply::patch_params(),
                        &Patch::Merge(json!({})),
                    )
                    .await
                {
                    Ok(_) => Ok(()),
                    // Deleted since the list: nothing left to migrate.
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .enumerate()
        .map(|(i, r)| {
            let left = total - i - 1;
            metrics.storage_migration(left as i64, false);
            if left % 100 == 0 && left > 0 {
                info!(rewritten = i + 1, left, "storage migration in progress");
            }
            r
        })
        .try_collect::<Vec<()>>()
        .await?;
    // Only now, and only if nobody changed the list meanwhile (an
    // apiserver with an older CRD could have added a version back).
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/status/storedVersions", "value": stored},
        {"op": "replace", "path": "/status/storedVersions", "value": [STORAGE_VERSION]},
    ]))
    .map_err(kube::Error::SerdeError)?;
    crds.patch_status(
        CRD_NAME,
        &crate::controller::apply::patch_params(),
        &Patch::<()>::Json(patch),
    )
    .await?;
    metrics.storage_migration(0, true);
    info!(
        rewritten = done.len(),
        "storage migration complete: every ModelService is stored as {STORAGE_VERSION}"
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(storage: &str, stored: &[&str]) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "metadata": {"name": CRD_NAME},
            "spec": {"group": "serving.modelservice.dev", "scope": "Namespaced",
                "names": {"plural": "modelservices", "kind": "ModelService"},
                "versions": [
                    {"name": "v1", "served": true, "storage": storage == "v1"},
                    {"name": "v1beta1", "served": true, "storage": storage == "v1beta1"},
                    {"name": "v1alpha1", "served": true, "storage": storage == "v1alpha1"}
                ]},
            "status": {"storedVersions": stored}
        }))
        .expect("crd")
    }

    #[test]
    fn nothing_to_do_once_only_the_storage_version_is_stored() {
        assert_eq!(plan(&crd("v1", &["v1"])), Plan::Done);
    }

    #[test]
    fn an_old_version_in_stored_versions_means_a_rewrite() {
        assert_eq!(
            plan(&crd("v1", &["v1alpha1", "v1beta1", "v1"])),
            Plan::Migrate {
                stored: vec!["v1alpha1".into(), "v1beta1".into(), "v1".into()]
            }
        );
        assert_eq!(
            plan(&crd("v1", &["v1beta1", "v1"])),
            Plan::Migrate {
                stored: vec!["v1beta1".into(), "v1".into()]
            }
        );
    }

    #[test]
    fn an_old_crd_is_never_migrated() {
        assert_eq!(
            plan(&crd("v1beta1", &["v1alpha1", "v1beta1"])),
            Plan::CrdTooOld {
                storage: Some("v1beta1".into())
            }
        );
        assert_eq!(
            plan(&crd("v1alpha1", &["v1alpha1"])),
            Plan::CrdTooOld {
                storage: Some("v1alpha1".into())
            }
        );
    }
}
