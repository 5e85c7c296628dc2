//! A bound on the operator's requests in flight to the API server.
//!
//! kube's client speaks HTTP/1.1, where a request in flight holds a TLS
//! connection of its own, with its buffers, and hyper keeps every one it
//! opened in its pool for 90 s: a cold burst of 32 reconciles, each with its
//! writes in parallel, opened about 60 on top of the watches. A bound on
//! requests is a bound on connections, and so on what they hold.
//!
//! Two kinds of request pass unbounded: watches, which stay open for
//! minutes and would hold their permits that long, and the leader's Lease,
//! whose renewal must not queue behind a burst of writes (the API server's
//! own fairness puts leader election in a level of its own for the same
//! reason).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::api_requests::is_watch;

/// The layer; `bound` requests may be in flight at once, and `waiting`
/// counts those that wait for a place.
#[derive(Clone)]
pub struct InFlightLayer {
    permits: Arc<Semaphore>,
    waiting: IntGauge,
}

impl InFlightLayer {
    pub fn new(bound: usize, waiting: IntGauge) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(bound.max(1))),
            waiting,
        }
    }
}

impl<S> tower_layer::Layer<S> for InFlightLayer {
    type Service = InFlight<S>;

    fn layer(&self, inner: S) -> InFlight<S> {
        InFlight {
            inner,
            permits: self.permits.clone(),
            waiting: self.waiting.clone(),
        }
    }
}

/// The service of [`InFlightLayer`]. It waits for a permit before it asks
/// the service below, which must therefore be cloneable (a buffer's is), so
/// that a request waiting for a permit holds nothing below it.
#[derive(Clone)]
pub struct InFlight<S> {
    inner: S,
    permits: Arc<Semaphore>,
    waiting: IntGauge,
}

/// One request counted in the waiting gauge until it is dropped, so a
/// request given up while it waits is not counted forever.
struct Waiting(IntGauge);

impl Waiting {
    fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Whether a request passes without a permit.
fn unbounded<B>(request: &Request<B>) -> bool {
    is_watch(request.uri().query())
        || request
            .uri()
            .path()
            .starts_with("/apis/coordination.k8s.io/")
}

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for InFlight<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
{
    type Response = Response<Permitted<ResBody>>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness below is awaited in the call, after the permit.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let mut inner = self.inner.clone();
        let permits = (!unbounded(&request)).then(|| self.permits.clone());
        let waiting = self.waiting.clone();
        Box::pin(async move {
            let permit = match permits {
                Some(permits) => {
                    let _counted = Waiting::new(&waiting);
                    // The semaphore is never closed, so a permit always comes.
                    permits.acquire_owned().await.ok()
                }
                None => None,
            };
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            let response = inner.call(request).await?;
            Ok(response.map(|body| Permitted { body, permit }))
        })
    }
}

/// A response body that holds its request's permit until the body has been
/// read to its end (or dropped): only then is the connection free again.
pub struct Permitted<B> {
    body: B,
    permit: Option<OwnedSemaphorePermit>,
}

impl<B: Body + Unpin> Body for Permitted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower_layer::Layer;
    use tower_service::Service;

    /// A service that answers at once and counts the answers whose bodies
    /// have not been dropped yet, i.e. the requests in flight below.
    #[derive(Clone, Default)]
    struct Below {
        open: Arc<AtomicUsize>,
    }

    struct Counted {
        open: Arc<AtomicUsize>,
        body: Full<Bytes>,
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.open.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl Body for Counted {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Pin::new(&mut self.get_mut().body).poll_frame(cx)
        }
    }

    impl tower_service::Service<Request<()>> for Below {
        type Response = Response<Counted>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<Counted>, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: Request<()>) -> Self::Future {
            self.open.fetch_add(1, Ordering::SeqCst);
            let body = Counted {
                open: self.open.clone(),
                body: Full::new(Bytes::from_static(b"{}")),
            };
            std::future::ready(Ok(Response::new(body)))
        }
    }

    fn request(uri: &str) -> Request<()> {
        Request::builder().uri(uri).body(()).expect("a request")
    }

    async fn answer(
        svc: &mut InFlight<Below>,
        uri: &str,
        wait: std::time::Duration,
    ) -> Option<Response<Permitted<Counted>>> {
        tokio::time::timeout(wait, svc.call(request(uri)))
            .await
            .ok()
            .map(|r| r.unwrap_or_else(|e| match e {}))
    }

    const SHORT: std::time::Duration = std::time::Duration::from_millis(50);
    const PATCH: &str = "/apis/apps/v1/namespaces/a/deployments/m";

    #[tokio::test]
    async fn a_request_past_the_bound_waits_until_a_body_is_read() {
        let below = Below::default();
        let waiting = IntGauge::new("waiting", "waiting").expect("a gauge");
        let mut svc = InFlightLayer::new(2, waiting.clone()).layer(below.clone());
        let first = answer(&mut svc, PATCH, SHORT).await.expect("first");
        let _second = answer(&mut svc, PATCH, SHORT).await.expect("second");
        assert!(
            answer(&mut svc, PATCH, SHORT).await.is_none(),
            "a third must wait while two bodies are unread"
        );
        assert_eq!(below.open.load(Ordering::SeqCst), 2, "and not reach below");
        assert_eq!(waiting.get(), 0, "a request given up waits no more");
        let third = tokio::spawn(svc.call(request(PATCH)));
        tokio::time::sleep(SHORT).await;
        assert_eq!(waiting.get(), 1, "one waits");
        let read = first.into_body().collect().await;
        assert!(read.is_ok());
        let third = tokio::time::timeout(SHORT, third).await;
        assert!(
            matches!(third, Ok(Ok(Ok(_)))),
            "a body read to its end frees its permit"
        );
        assert_eq!(waiting.get(), 0);
    }

    #[tokio::test]
    async fn a_dropped_body_frees_its_permit() {
        let mut svc = InFlightLayer::new(1, IntGauge::new("w", "w").expect("a gauge"))
            .layer(Below::default());
        let first = answer(&mut svc, PATCH, SHORT).await.expect("first");
        drop(first);
        assert!(answer(&mut svc, PATCH, SHORT).await.is_some());
    }

    #[tokio::test]
    async fn watches_and_the_lease_pass_a_full_bound() {
        let mut svc = InFlightLayer::new(1, IntGauge::new("w", "w").expect("a gauge"))
            .layer(Below::default());
        let _held = answer(&mut svc, PATCH, SHORT).await.expect("first");
        for uri in [
            "/apis/apps/v1/deployments?watch=true&resourceVersion=5",
            "/apis/coordination.k8s.io/v1/namespaces/ops/leases/modelservice-operator",
        ] {
            assert!(
                answer(&mut svc, uri, SHORT).await.is_some(),
                "{uri} must not wait"
            );
        }
        assert!(
            answer(&mut svc, "/api/v1/pods?limit=500", SHORT)
                .await
                .is_none()
        );
    }
}
