//! What status says about the version strategy: each track's pods and
//! weight, whether the canary is healthy, and whether the route is served.

use serde_json::Value;

use super::canary_wait::{self, CanaryWaiting};
use super::conditions::Wanted;
use super::diagnosis::Problem;
use super::reasons;
use super::rollback::RolledBack;
use super::rollout::DeploymentState;
use super::route::acceptance;
use super::tracks::Weights;
use crate::api::{RouteStatus, TrackStatus, TracksStatus, condition_types as ct};

/// The canary as observed, while the spec has one.
#[derive(Clone, Copy, Debug)]
pub struct CanarySeen<'a> {
    /// Its Deployment after this reconcile's apply.
    pub deployment: Option<DeploymentState<'a>>,
    pub rolled_back: Option<&'a RolledBack>,
    /// The route's weights, with a route.
    pub weights: Option<&'a Weights>,
    /// Its pods wait for GPUs (see `canary_wait`).
    pub waiting: Option<&'a CanaryWaiting>,
    /// Its replicas while held for the stable track's rollout.
    pub held: Option<i32>,
    /// The replicas the spec asks of it.
    pub wanted: i32,
}

/// The route as observed, while the spec has one.
#[derive(Clone, Copy, Debug)]
pub struct RouteSeen<'a> {
    pub name: &'a str,
    /// Whether the cluster serves Gateway API's HTTPRoute.
    pub installed: bool,
    /// The HTTPRoute's status, as the Gateway controllers wrote it.
    pub status: Option<&'a Value>,
    /// How many parents the spec names.
    pub parents: usize,
    /// Why the weights differ from the spec's, when they do.
    pub weights_why: Option<&'a str>,
}

fn track(d: Option<DeploymentState<'_>>, weight: Option<i32>) -> TrackStatus {
    let st = d.and_then(|d| d.status);
    TrackStatus {
        replicas: st.and_then(|s| s.replicas).unwrap_or(0),
        ready_replicas: st.and_then(|s| s.ready_replicas).unwrap_or(0),
        weight,
    }
}

/// Both tracks.
pub fn tracks(stable: Option<DeploymentState<'_>>, c: &CanarySeen<'_>) -> TracksStatus {
    TracksStatus {
        stable: track(stable, c.weights.map(|w| w.stable)),
        canary: track(c.deployment, c.weights.map(|w| w.canary)),
    }
}

/// CanaryHealthy: False with the cause while rolled back.
pub fn canary_healthy(c: &CanarySeen<'_>) -> Wanted {
    if let Some(rb) = c.rolled_back {
        return Wanted::new(
            ct::CANARY_HEALTHY,
            false,
            &rb.reason,
            format!(
                "the canary is rolled back to 0 replicas and gets no traffic: {}. It stays rolled back until rollout.canary changes its pod template (image, args, env or model version)",
                rb.message
            ),
        );
    }
    let t = track(c.deployment, None);
    if let Some(w) = canary_wait::condition(c.waiting, c.held, t.ready_replicas, c.wanted) {
        return w;
    }
    let desired = c.deployment.and_then(|d| d.replicas).unwrap_or(1);
    if t.ready_replicas >= desired {
        Wanted::new(
            ct::CANARY_HEALTHY,
            true,
            reasons::SERVING,
            format!("{}/{desired} canary pods ready", t.ready_replicas),
        )
    } else {
        Wanted::new(
            ct::CANARY_HEALTHY,
            true,
            reasons::STARTING,
            format!(
                "{}/{desired} canary pods ready; the canary gets traffic once one is",
                t.ready_replicas
            ),
        )
    }
}

/// status.route.
pub fn route(r: &RouteSeen<'_>) -> RouteStatus {
    if !r.installed {
        return RouteStatus {
            name: r.name.to_string(),
            accepted: None,
            message: route_problem(r).map(|p| p.message),
            parents: Vec::new(),
        };
    }
    let parents = acceptance::parents(r.status);
    let accepted = acceptance::accepted(&parents, r.parents);
    let message = match accepted {
        Some(false) => Some("a Gateway refused the route: see parents".to_string()),
        None => Some("waiting for the Gateways to accept the route".to_string()),
        Some(true) => None,
    }
    .into_iter()
    .chain(r.weights_why.map(|w| format!("weights: {w}")))
    .reduce(|a, b| format!("{a}; {b}"));
    RouteStatus {
        name: r.name.to_string(),
        accepted,
        message,
        parents,
    }
}

/// The route's problem: Gateway API missing from the cluster.
pub fn route_problem(r: &RouteSeen<'_>) -> Option<Problem> {
    (!r.installed).then(|| Problem {
        reason: reasons::ROUTE_UNAVAILABLE,
        message: format!(
            "route is set, but the cluster has no Gateway API HTTPRoute (gateway.networking.k8s.io/v1); install Gateway API, or remove route. The model is still served through Service {}",
            r.name
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DeploymentStatus;
    use serde_json::json;

    fn state(st: &DeploymentStatus) -> DeploymentState<'_> {
        DeploymentState {
            generation: 1,
            replicas: Some(2),
            status: Some(st),
        }
    }

    #[test]
    fn a_rolled_back_canary_says_why_and_a_starting_one_is_not_unhealthy() {
        let rb = RolledBack {
            template: "t".into(),
            reason: "CrashLooping".into(),
            message: "server keeps restarting".into(),
        };
        let c = CanarySeen {
            deployment: None,
            rolled_back: Some(&rb),
            weights: None,
            waiting: None,
            held: None,
            wanted: 2,
        };
        let w = canary_healthy(&c);
        assert_eq!((w.status, w.reason.as_str()), (false, "CrashLooping"));
        assert!(w.message.contains("server keeps restarting"));
        let st = DeploymentStatus {
            replicas: Some(2),
            ready_replicas: Some(1),
            ..Default::default()
        };
        let c = CanarySeen {
            deployment: Some(state(&st)),
            rolled_back: None,
            weights: None,
            waiting: None,
            held: None,
            wanted: 2,
        };
        let w = canary_healthy(&c);
        assert_eq!((w.status, w.reason.as_str()), (true, "Starting"));
        let t = tracks(None, &c);
        assert_eq!((t.canary.replicas, t.canary.ready_replicas), (2, 1));
        // The same canary with a pod waiting for GPUs is not Starting.
        let waiting = crate::core::canary_wait::CanaryWaiting {
            problem: crate::core::diagnosis::Problem {
                reason: reasons::INSUFFICIENT_GPU,
                message: "no node has 1 free nvidia.com/gpu".into(),
            },
            placed: 1,
            past_grace: false,
        };
        let c = CanarySeen {
            waiting: Some(&waiting),
            ..c
        };
        let w = canary_healthy(&c);
        assert_eq!((w.status, w.reason.as_str()), (false, "InsufficientGPU"));
    }

    #[test]
    fn the_route_says_when_gateway_api_is_missing_or_not_yet_accepted() {
        let r = RouteSeen {
            name: "llama",
            installed: false,
            status: None,
            parents: 1,
            weights_why: None,
        };
        assert!(route(&r).message.is_some_and(|m| m.contains("Gateway API")));
        assert_eq!(
            route_problem(&r).map(|p| p.reason),
            Some("RouteUnavailable")
        );
        let st = json!({"parents": [{"parentRef": {"name": "gw"},
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]}]});
        let ok = RouteSeen {
            installed: true,
            status: Some(&st),
            weights_why: Some("the canary has no ready pod yet"),
            ..r
        };
        let s = route(&ok);
        assert_eq!(s.accepted, Some(true));
        assert_eq!(
            s.message.as_deref(),
            Some("weights: the canary has no ready pod yet")
        );
        assert_eq!(route_problem(&ok), None);
        let waiting = RouteSeen {
            status: None,
            weights_why: None,
            ..ok
        };
        assert_eq!(route(&waiting).accepted, None);
    }
}
