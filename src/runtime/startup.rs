//! Startup checks with patience: an API server that is still coming up, or a
//! CRD applied a moment after the operator, gets retries and a clear log line;
//! only a problem that outlasts the startup timeout ends the process.

use std::time::Duration;

use kube::api::ListParams;
use kube::{Api, Client};
use tracing::warn;

use super::shutdown::Shutdown;
use crate::api::{CRD_FILE, ModelService};

/// Why the operator cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(
        "the ModelService CRD is not installed (the API server answers 404 for modelservices.serving.modelservice.dev); install it with `kubectl apply -f {CRD_FILE}` or `modelservice-operator crd | kubectl apply -f -`"
    )]
    CrdMissing,
    #[error(
        "the API server refuses to list ModelServices ({0}); grant the operator's ServiceAccount the RBAC in config/rbac"
    )]
    Forbidden(String),
    #[error("cannot reach the Kubernetes API server: {0}")]
    Unreachable(String),
    #[error("shutdown requested during startup")]
    Cancelled,
}

/// Retries until ModelServices can be listed, `timeout` runs out, or shutdown.
pub async fn wait_for_api(
    client: &Client,
    namespace: Option<&str>,
    timeout: Duration,
    shutdown: &Shutdown,
) -> Result<(), StartupError> {
    let api: Api<ModelService> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(500);
    loop {
        let err = match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => StartupError::CrdMissing,
            Err(kube::Error::Api(s)) if s.code == 401 || s.code == 403 => {
                StartupError::Forbidden(s.message.clone())
            }
            Err(e) => StartupError::Unreachable(e.to_string()),
        };
        if tokio::time::Instant::now() + delay > deadline {
            return Err(err);
        }
        warn!(problem = %err, retry_in = ?delay, "waiting for the API server");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.clone().wait() => return Err(StartupError::Cancelled),
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}
