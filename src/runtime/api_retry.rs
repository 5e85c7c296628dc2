//! Which requests to the API server are tried again, and when.
//!
//! kube's client retries 429, 503 and 504 answers by itself
//! (`Config::default_retry`), with a policy made for one-off requests: up to
//! 15 more tries, the wait growing from 5 ms towards 1,000 s. Two things in it
//! hurt an operator. Every request's policy is a copy of one whose random
//! source is a hash of a counter, so every copy draws the same "jitter": all
//! the requests that failed together retry together, however many. And a
//! watch is retried like any request, so a watch that failed in an outage
//! answered with 503s (a load balancer in front of a restarting server, the
//! fake API server of the tests) slept through those growing waits, where
//! the watcher's own short backoff (`watches`) never saw it fail: after two
//! restarts of 7 s, all twelve of the operator's watches came back at the
//! same instant, 10 s after the server had; after two of 3 s, now and then
//! long enough for a Deployment deleted just after the outage to stay
//! missing for 20 s (the outage scenario's flake in CI).
//!
//! So the operator's client is built without kube's retry, and with this:
//! - a watch is never retried here. Its failure goes to the watcher, which
//!   backs off on its own, with jitter of its own, and relists if it must;
//! - any other request is tried again on 429, 503 or 504, at most
//!   [`RETRIES`] times: 100 ms doubling to 2 s, plus up to as much again in
//!   jitter drawn for this request alone (about 10 s in all at worst), or
//!   after the server's `Retry-After` when that is longer, up to 5 s. Then the
//!   error goes to the caller: a reconcile fails and its ModelService backs
//!   off (`controller::backoff`); a watcher's list backs off with its watch.

use std::time::Duration;

use backon::BackoffBuilder;
use http::{HeaderValue, Request, Response, StatusCode, header::RETRY_AFTER};
use kube::client::Body;
use tower::retry::{Policy, RetryLayer};

use super::api_requests::is_watch;

/// Tries after the first, for a request that is not a watch.
pub const RETRIES: usize = 6;
const FIRST_WAIT: Duration = Duration::from_millis(100);
const LONGEST_WAIT: Duration = Duration::from_secs(2);
/// The longest a server's `Retry-After` is followed: a reconcile holds one
/// of the few reconcile slots while it waits.
const LONGEST_SERVER_WAIT: Duration = Duration::from_secs(5);

/// Requests that may wait for the buffer in front of kube's stack, as many
/// as kube's own client buffer takes.
pub const QUEUE: usize = 1024;

/// The retry layer of the operator's client.
pub fn layer() -> RetryLayer<ApiRetry> {
    RetryLayer::new(ApiRetry::default())
}

/// The retry state of one request.
#[derive(Debug, Default)]
pub struct ApiRetry {
    /// Built at the first retry, so that each request draws its own jitter.
    waits: Option<backon::ExponentialBackoff>,
}

/// A copy starts afresh, with nothing of the original's waits or random
/// source: tower copies the policy for every request, and copies that shared
/// a random source would retry in lockstep.
impl Clone for ApiRetry {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl ApiRetry {
    /// How long to wait before trying again after an answer with `status`
    /// (and the server's `Retry-After`, if any); `None`: do not.
    pub fn next_wait(
        &mut self,
        status: StatusCode,
        retry_after: Option<&HeaderValue>,
    ) -> Option<Duration> {
        if !matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT
        ) {
            return None;
        }
        let waits = self.waits.get_or_insert_with(|| {
            backon::ExponentialBuilder::default()
                .with_min_delay(FIRST_WAIT)
                .with_max_delay(LONGEST_WAIT)
                .with_factor(2.0)
                .with_jitter()
                .with_max_times(RETRIES)
                .build()
        });
        let ours = waits.next()?;
        let asked = retry_after
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(LONGEST_SERVER_WAIT));
        Some(asked.map_or(ours, |asked| asked.max(ours)))
    }
}

impl<B, E> Policy<Request<Body>, Response<B>, E> for ApiRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut Request<Body>,
        result: &mut Result<Response<B>, E>,
    ) -> Option<Self::Future> {
        let response = result.as_ref().ok()?;
        self.next_wait(response.status(), response.headers().get(RETRY_AFTER))
            .map(tokio::time::sleep)
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        if is_watch(req.uri().query()) {
            return None;
        }
        let mut copy = Request::builder()
            .method(req.method().clone())
            .uri(req.uri().clone())
            .version(req.version())
            .body(req.body().try_clone()?)
            .ok()?;
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str) -> Request<Body> {
        Request::builder()
            .method("PATCH")
            .uri(uri)
            .header("content-type", "application/apply-patch+yaml")
            .body(Body::from(b"{}".to_vec()))
            .expect("a request")
    }

    /// The policy as the client uses it.
    fn copy(p: &mut ApiRetry, req: &Request<Body>) -> Option<Request<Body>> {
        <ApiRetry as Policy<Request<Body>, Response<()>, ()>>::clone_request(p, req)
    }

    fn waits(policy: &mut ApiRetry, status: StatusCode) -> Vec<Duration> {
        std::iter::from_fn(|| policy.next_wait(status, None)).collect()
    }

    #[test]
    fn a_watch_is_left_to_the_watcher() {
        let mut p = ApiRetry::default();
        let watch = Request::builder()
            .uri("/apis/apps/v1/namespaces/ns/deployments?&watch=true&timeoutSeconds=290&resourceVersion=5")
            .body(Body::empty())
            .expect("a request");
        assert!(copy(&mut p, &watch).is_none());
        let list = Request::builder()
            .uri("/apis/apps/v1/namespaces/ns/deployments?labelSelector=a%3Db")
            .body(Body::empty())
            .expect("a request");
        assert!(copy(&mut p, &list).is_some());
    }

    #[test]
    fn a_copy_of_a_request_is_the_same_request() {
        let mut p = ApiRetry::default();
        let req = request("/apis/apps/v1/namespaces/ns/deployments/m?fieldManager=x&force=true");
        let Some(copy) = copy(&mut p, &req) else {
            panic!("a patch with a body in memory can be sent again");
        };
        assert_eq!(copy.method(), req.method());
        assert_eq!(copy.uri(), req.uri());
        assert_eq!(copy.headers(), req.headers());
    }

    #[test]
    fn only_an_overloaded_or_unavailable_server_is_asked_again() {
        for status in [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::GATEWAY_TIMEOUT,
        ] {
            assert!(ApiRetry::default().next_wait(status, None).is_some());
        }
        for status in [
            StatusCode::OK,
            StatusCode::CONFLICT,
            StatusCode::UNPROCESSABLE_ENTITY,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::NOT_FOUND,
        ] {
            assert_eq!(ApiRetry::default().next_wait(status, None), None);
        }
    }

    #[test]
    fn retries_are_few_and_short() {
        let mut p = ApiRetry::default();
        let w = waits(&mut p, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(w.len(), RETRIES);
        assert!(w[0] >= FIRST_WAIT && w[0] <= 2 * FIRST_WAIT, "{w:?}");
        assert!(w.iter().all(|d| *d <= 2 * LONGEST_WAIT), "{w:?}");
        assert!(
            w.iter().sum::<Duration>() <= Duration::from_secs(11),
            "{w:?}"
        );
    }

    #[test]
    fn copies_draw_their_own_jitter() {
        // kube's policy gave every copy the same random source: all the
        // requests that failed together came back together.
        let original = ApiRetry::default();
        let mut a = original.clone();
        let mut b = original.clone();
        let mut c = original.clone();
        let (a, b, c) = (
            waits(&mut a, StatusCode::SERVICE_UNAVAILABLE),
            waits(&mut b, StatusCode::SERVICE_UNAVAILABLE),
            waits(&mut c, StatusCode::SERVICE_UNAVAILABLE),
        );
        assert!(a != b || b != c, "three copies drew the same waits: {a:?}");
    }

    #[test]
    fn a_copy_made_mid_retry_starts_afresh() {
        let mut p = ApiRetry::default();
        let _ = waits(&mut p, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(p.next_wait(StatusCode::SERVICE_UNAVAILABLE, None), None);
        let mut copy = p.clone();
        assert_eq!(
            waits(&mut copy, StatusCode::SERVICE_UNAVAILABLE).len(),
            RETRIES
        );
    }

    #[test]
    fn the_server_may_ask_for_longer_but_not_for_ever() {
        let mut p = ApiRetry::default();
        let three = HeaderValue::from_static("3");
        assert_eq!(
            p.next_wait(StatusCode::TOO_MANY_REQUESTS, Some(&three)),
            Some(Duration::from_secs(3))
        );
        let hour = HeaderValue::from_static("3600");
        assert_eq!(
            p.next_wait(StatusCode::TOO_MANY_REQUESTS, Some(&hour)),
            Some(LONGEST_SERVER_WAIT)
        );
        let junk = HeaderValue::from_static("soon");
        let w = p.next_wait(StatusCode::TOO_MANY_REQUESTS, Some(&junk));
        assert!(w.is_some_and(|w| w <= 2 * LONGEST_WAIT), "{w:?}");
    }
}
