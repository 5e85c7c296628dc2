//! Counting every request the operator sends to the API server.
//!
//! A tower layer on the kube client labels each request with the verb and
//! resource the API server would log for it, and its status code, in
//! `modelservice_api_requests_total`. It is what tells a platform team what
//! the operator costs their API server, and it is how the convergence
//! benchmark counts requests against a real cluster, where there is no fake
//! server to count them.
//!
//! The layer sits outside the retry layer (`api_retry`), so a request counts
//! once, with the code it finally got.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use crate::metrics::Metrics;

/// The Kubernetes verb and resource (`plural` or `plural/subresource`) of a
/// request, as the API server's audit log would name them.
pub fn classify(method: &str, path: &str, query: Option<&str>) -> (&'static str, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    // Cluster-scoped ("namespaces", "namespaces/x") or namespaced
    // ("namespaces/x/deployments/...").
    // `namespaces/x/status` and `namespaces/x/finalize` are subresources of
    // the namespace itself, as the API server parses them.
    let rest = match rest {
        ["namespaces", _ns, "status" | "finalize"] => rest,
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("other".to_string(), true),
        [plural] => (plural.to_string(), false),
        [plural, _name] => (plural.to_string(), true),
        [plural, _name, sub, ..] => (format!("{plural}/{sub}"), true),
    };
    let watch = is_watch(query);
    let verb = match method {
        "GET" if watch => "watch",
        "GET" if named => "get",
        "GET" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if named => "delete",
        "DELETE" => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

/// Whether a request's query string asks for a watch.
pub fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// The layer that counts requests into `metrics`.
#[derive(Clone)]
pub struct CountRequests {
    metrics: Arc<Metrics>,
}

impl CountRequests {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// A service whose requests are counted.
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Counted<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (verb, resource) = classify(req.method().as_str(), req.uri().path(), req.uri().query());
        let metrics = self.metrics.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            let code = match &res {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            metrics.api_request(verb, &resource, &code);
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::classify;

    fn c(method: &str, path: &str, query: Option<&str>) -> (&'static str, String) {
        classify(method, path, query)
    }

    #[test]
    fn namespaced_objects_and_subresources() {
        assert_eq!(
            c(
                "PATCH",
                "/apis/apps/v1/namespaces/ns/deployments/m",
                Some("fieldManager=x&force=true")
            ),
            ("patch", "deployments".into())
        );
        assert_eq!(
            c(
                "PATCH",
                "/apis/serving.modelservice.dev/v1alpha1/namespaces/ns/modelservices/m/status",
                None
            ),
            ("patch", "modelservices/status".into())
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces/ns/services/m", None),
            ("get", "services".into())
        );
        assert_eq!(
            c("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", None),
            ("create", "events".into())
        );
        assert_eq!(
            c(
                "DELETE",
                "/apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers/m",
                None
            ),
            ("delete", "horizontalpodautoscalers".into())
        );
    }

    #[test]
    fn lists_and_watches_in_one_namespace_or_all() {
        assert_eq!(
            c(
                "GET",
                "/apis/apps/v1/namespaces/ns/deployments",
                Some("labelSelector=a%3Db&limit=500")
            ),
            ("list", "deployments".into())
        );
        assert_eq!(
            c(
                "GET",
                "/apis/apps/v1/deployments",
                Some("watch=true&resourceVersion=5")
            ),
            ("watch", "deployments".into())
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces/ns/pods", None),
            ("list", "pods".into())
        );
    }

    #[test]
    fn namespaces_themselves_are_cluster_scoped_objects() {
        assert_eq!(
            c("GET", "/api/v1/namespaces/ns", None),
            ("get", "namespaces".into())
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces", None),
            ("list", "namespaces".into())
        );
    }

    #[test]
    fn namespace_subresources_stay_namespace_subresources() {
        assert_eq!(
            c("PUT", "/api/v1/namespaces/x/finalize", None),
            ("update", "namespaces/finalize".into())
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces/x/status", None),
            ("get", "namespaces/status".into())
        );
    }

    #[test]
    fn discovery_is_other() {
        assert_eq!(c("GET", "/version", None), ("get", "other".into()));
        assert_eq!(c("GET", "/apis/apps/v1", None), ("get", "other".into()));
    }
}
