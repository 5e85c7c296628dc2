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
use crate::api::{PoolStatus, RouteStatus, TrackStatus, TracksStatus, condition_types as ct};

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
    /// With `route.backend: InferencePool`: whether the cluster serves
    /// InferencePool, and each pool as observed.
    pub pools: Option<PoolsSeen<'a>>,
}

/// The InferencePools as observed.
#[derive(Clone, Copy, Debug)]
pub struct PoolsSeen<'a> {
    pub installed: bool,
    pub pools: &'a [PoolSeen<'a>],
}

/// One InferencePool and its endpoint picker, as observed.
#[derive(Clone, Copy, Debug)]
pub struct PoolSeen<'a> {
    pub name: &'a str,
    /// The pool's status, as the Gateways wrote it.
    pub status: Option<&'a Value>,
    /// The picker's Deployment and its ready pods.
    pub picker: &'a str,
    pub picker_ready: i32,
}

/// One pool's status: accepted when every Gateway that reported on it
/// accepted it and resolved its picker.
fn pool(p: &PoolSeen<'_>) -> PoolStatus {
    let parents = acceptance::parents(p.status);
    let refused = acceptance::refs_refused(p.status)
        || parents
            .iter()
            .any(|x| x.accepted.as_deref() == Some("False"));
    let accepted = if refused {
        Some(false)
    } else {
        (!parents.is_empty()
            && parents
                .iter()
                .all(|x| x.accepted.as_deref() == Some("True")))
        .then_some(true)
    };
    PoolStatus {
        name: p.name.to_string(),
        accepted,
        parents,
        endpoint_picker: p.picker.to_string(),
        endpoint_picker_ready_replicas: p.picker_ready,
    }
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
    if let Some(p) = route_problem(r) {
        return RouteStatus {
            name: r.name.to_string(),
            accepted: None,
            message: Some(p.message),
            parents: Vec::new(),
            pools: Vec::new(),
        };
    }
    let parents = acceptance::parents(r.status);
    let accepted = acceptance::accepted(&parents, r.parents);
    let pools: Vec<PoolStatus> = r
        .pools
        .map(|p| p.pools.iter().map(pool).collect())
        .unwrap_or_default();
    let two_pools = pools.len() > 1;
    let message = match accepted {
        // Weighted backendRefs to two pools are in the Inference
        // Extension's conformance suite, but not every Gateway has them.
        Some(false) if two_pools => Some("a Gateway refused the route, which weighs two InferencePools (one per track): see parents. A Gateway without weighted InferencePool backends cannot run a canary on pools; use route.backend Service for the canary, or set rollout.canary.weight 0".to_string()),
        Some(false) => Some("a Gateway refused the route: see parents".to_string()),
        None => Some("waiting for the Gateways to accept the route".to_string()),
        Some(true) => None,
    }
    .into_iter()
    .chain(r.weights_why.map(|w| format!("weights: {w}")))
    .chain(
        pools
            .iter()
            .filter(|p| p.endpoint_picker_ready_replicas == 0)
            .map(|p| format!("InferencePool {}: its endpoint picker {} has no ready pod", p.name, p.endpoint_picker)),
    )
    .chain(
        pools
            .iter()
            .filter(|p| p.accepted == Some(false))
            .map(|p| format!("InferencePool {}: a Gateway did not accept it, see pools", p.name)),
    )
    .reduce(|a, b| format!("{a}; {b}"));
    RouteStatus {
        name: r.name.to_string(),
        accepted,
        message,
        parents,
        pools,
    }
}

/// The route's problem: Gateway API, or with `route.backend:
/// InferencePool` the Inference Extension, missing from the cluster.
pub fn route_problem(r: &RouteSeen<'_>) -> Option<Problem> {
    let missing = match (r.installed, r.pools.is_none_or(|p| p.installed)) {
        (true, true) => return None,
        (false, true) => {
            "Gateway API HTTPRoute (gateway.networking.k8s.io/v1); install Gateway API"
        }
        (true, false) => {
            "InferencePool (inference.networking.k8s.io/v1) for route.backend InferencePool; install the Gateway API Inference Extension's CRDs and a Gateway that supports them"
        }
        (false, false) => {
            "Gateway API HTTPRoute (gateway.networking.k8s.io/v1) and no InferencePool (inference.networking.k8s.io/v1); install Gateway API and the Gateway API Inference Extension"
        }
    };
    Some(Problem {
        reason: reasons::ROUTE_UNAVAILABLE,
        message: format!(
            "route is set, but the cluster has no {missing}, or remove route. The model is still served through Service {}",
            r.name
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_says_when_a_picker_is_not_ready_or_a_gateway_refuses_two_pools() {
        let pools = [
            PoolSeen {
                name: "m",
                status: None,
                picker: "m-epp",
                picker_ready: 1,
            },
            PoolSeen {
                name: "m-canary",
                status: None,
                picker: "m-canary-epp",
                picker_ready: 0,
            },
        ];
        let refused = json!({"parents": [{"parentRef": {"name": "gw"},
            "conditions": [{"type": "Accepted", "status": "False", "reason": "UnsupportedValue"}]}]});
        let r = RouteSeen {
            name: "m",
            installed: true,
            status: Some(&refused),
            parents: 1,
            weights_why: None,
            pools: Some(PoolsSeen {
                installed: true,
                pools: &pools,
            }),
        };
        let s = route(&r);
        assert_eq!(s.accepted, Some(false));
        assert_eq!(s.pools.len(), 2);
        let m = s.message.unwrap_or_default();
        assert!(m.contains("two InferencePools"), "{m}");
        assert!(m.contains("m-canary-epp has no ready pod"), "{m}");
        // Without the pool's API: the reason names it, and no pools.
        let missing = RouteSeen {
            pools: Some(PoolsSeen {
                installed: false,
                pools: &[],
            }),
            ..r
        };
        let p = route_problem(&missing).expect("a problem");
        assert_eq!(p.reason, "RouteUnavailable");
        assert!(p.message.contains("InferencePool"), "{}", p.message);
        assert!(route(&missing).pools.is_empty());
    }

    #[test]
    fn a_pool_is_accepted_only_when_its_gateways_accept_it_and_resolve_its_picker() {
        let seen = |status: Option<&Value>| {
            pool(&PoolSeen {
                name: "m",
                status,
                picker: "m-epp",
                picker_ready: 1,
            })
            .accepted
        };
        assert_eq!(seen(None), None, "no Gateway has said");
        let cond = |t: &str, s: &str, r: &str| json!({"type": t, "status": s, "reason": r});
        let parents = |conds: Vec<Value>| json!({"parents": [{"parentRef": {"name": "gw"}, "conditions": conds}]});
        let ok = parents(vec![
            cond("Accepted", "True", "SupportedByParent"),
            cond("ResolvedRefs", "True", "ResolvedRefs"),
        ]);
        assert_eq!(seen(Some(&ok)), Some(true));
        let no_picker = parents(vec![
            cond("Accepted", "True", "Accepted"),
            cond("ResolvedRefs", "False", "InvalidExtensionRef"),
        ]);
        assert_eq!(seen(Some(&no_picker)), Some(false));
        let refused = parents(vec![cond("Accepted", "False", "NotSupportedByParent")]);
        assert_eq!(seen(Some(&refused)), Some(false));
        let pending = parents(vec![cond("Accepted", "Unknown", "Pending")]);
        assert_eq!(seen(Some(&pending)), None);
    }
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
            pools: None,
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
