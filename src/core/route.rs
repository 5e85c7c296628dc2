//! The desired HTTPRoute, present only with `route`: the model behind a
//! Gateway, on a path prefix, split between the tracks by weight.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::ValidSpec;
use super::labels::child_meta;
use crate::api::gateway::{
    BackendRef, HttpRoute, HttpRouteMatch, HttpRouteRule, HttpRouteSpec, PathMatch,
};
use crate::api::inference;

/// One backend of the route, a Service or an InferencePool, and its weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub name: String,
    pub pool: bool,
    pub weight: i32,
}

impl Backend {
    /// The Service `name`.
    pub fn service(name: String, weight: i32) -> Self {
        Self {
            name,
            pool: false,
            weight,
        }
    }

    /// The InferencePool `name`.
    pub fn pool(name: String, weight: i32) -> Self {
        Self {
            name,
            pool: true,
            weight,
        }
    }
}

/// Builds the HTTPRoute for `v` sending to `backends`, or `None` without
/// `route`.
pub fn build(
    v: &ValidSpec,
    owner: Option<&OwnerReference>,
    backends: &[Backend],
) -> Option<HttpRoute> {
    let r = v.spec.route.as_ref()?;
    let port = v.spec.runtime.port;
    Some(HttpRoute::new(
        child_meta(v, owner),
        HttpRouteSpec {
            parent_refs: r.parent_refs.clone(),
            hostnames: r.hostnames.clone(),
            rules: vec![HttpRouteRule {
                matches: vec![HttpRouteMatch {
                    path: PathMatch {
                        type_: "PathPrefix".into(),
                        value: r.path.clone(),
                    },
                }],
                backend_refs: backends
                    .iter()
                    .map(|b| BackendRef {
                        group: b.pool.then(|| inference::GROUP.to_string()),
                        kind: b.pool.then(|| inference::KIND.to_string()),
                        name: b.name.clone(),
                        port: (!b.pool).then_some(port),
                        weight: b.weight,
                    })
                    .collect(),
            }],
        },
    ))
}

/// The HTTPRoute's acceptance by its parents, read from its status as the
/// Gateway controllers wrote it.
pub mod acceptance {
    use crate::api::RouteParentStatus;
    use serde_json::Value;

    /// Each parent's view, from the HTTPRoute's `status` (any shape: a
    /// malformed one reads as no report).
    pub fn parents(status: Option<&Value>) -> Vec<RouteParentStatus> {
        let Some(parents) = status
            .and_then(|s| s.get("parents"))
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        parents.iter().map(parent).collect()
    }

    fn parent(p: &Value) -> RouteParentStatus {
        let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let r = p.get("parentRef");
        let mut name = match s(r.and_then(|r| r.get("namespace"))) {
            Some(ns) => format!(
                "{ns}/{}",
                s(r.and_then(|r| r.get("name"))).unwrap_or_default()
            ),
            None => s(r.and_then(|r| r.get("name"))).unwrap_or_default(),
        };
        if let Some(section) = s(r.and_then(|r| r.get("sectionName"))) {
            name = format!("{name}/{section}");
        }
        let conds: Vec<&Value> = p
            .get("conditions")
            .and_then(Value::as_array)
            .map(|c| c.iter().collect())
            .unwrap_or_default();
        let find = |t: &str| {
            conds
                .iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
        };
        let accepted = find("Accepted");
        // A refused backend says more than an accepted route.
        let refs_false = find("ResolvedRefs")
            .filter(|c| c.get("status").and_then(Value::as_str) == Some("False"));
        let telling = refs_false.or(accepted);
        RouteParentStatus {
            parent: name,
            accepted: accepted.and_then(|c| s(c.get("status"))),
            reason: telling.and_then(|c| s(c.get("reason"))),
            message: telling
                .and_then(|c| s(c.get("message")))
                .filter(|m| !m.is_empty()),
        }
    }

    /// Whether a parent said it cannot resolve what the object refers to
    /// (its ResolvedRefs condition is False): for a pool, its endpoint
    /// picker.
    pub fn refs_refused(status: Option<&Value>) -> bool {
        status
            .and_then(|s| s.get("parents"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("conditions").and_then(Value::as_array))
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some("ResolvedRefs")
                    && c.get("status").and_then(Value::as_str) == Some("False")
            })
    }

    /// True when every parent accepted the route, false when one refused
    /// it, unknown until each has said.
    pub fn accepted(parents: &[RouteParentStatus], expected: usize) -> Option<bool> {
        if parents
            .iter()
            .any(|p| p.accepted.as_deref() == Some("False"))
        {
            return Some(false);
        }
        let yes = parents
            .iter()
            .filter(|p| p.accepted.as_deref() == Some("True"))
            .count();
        (expected > 0 && yes >= expected).then_some(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ParentReference, Route};
    use crate::core::children::tests::valid;
    use serde_json::json;

    fn routed() -> ValidSpec {
        let mut v = valid();
        v.spec.route = Some(Box::new(Route {
            parent_refs: vec![ParentReference {
                name: "gw".into(),
                namespace: Some("infra".into()),
                section_name: None,
                port: None,
                group: None,
                kind: None,
            }],
            hostnames: vec!["llama.example".into()],
            path: "/v1".into(),
            backend: None,
            inference_pool: None,
        }));
        v
    }

    #[test]
    fn the_route_matches_the_prefix_and_weighs_the_backends() {
        let b = [
            Backend::service("llama-stable".into(), 90),
            Backend::service("llama-canary".into(), 10),
        ];
        let r = build(&routed(), None, &b).expect("a route");
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v["apiVersion"], "gateway.networking.k8s.io/v1");
        assert_eq!(v["metadata"]["name"], "llama");
        assert_eq!(
            v["spec"]["parentRefs"],
            json!([{"name": "gw", "namespace": "infra"}])
        );
        assert_eq!(v["spec"]["hostnames"], json!(["llama.example"]));
        assert_eq!(
            v["spec"]["rules"][0],
            json!({"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                "backendRefs": [{"name": "llama-stable", "port": 8000, "weight": 90},
                                {"name": "llama-canary", "port": 8000, "weight": 10}]})
        );
        assert_eq!(build(&valid(), None, &b), None, "no route asked for");
    }

    #[test]
    fn acceptance_is_read_from_each_parent() {
        let st = json!({"parents": [
            {"parentRef": {"name": "gw", "namespace": "infra"}, "controllerName": "x",
             "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}]},
            {"parentRef": {"name": "gw2", "sectionName": "https"}, "controllerName": "x",
             "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"},
                            {"type": "ResolvedRefs", "status": "False", "reason": "BackendNotFound", "message": "no llama-canary"}]}]});
        let p = acceptance::parents(Some(&st));
        assert_eq!(p[0].parent, "infra/gw");
        assert_eq!(p[0].message, None);
        assert_eq!(p[1].parent, "gw2/https");
        assert_eq!(p[1].reason.as_deref(), Some("BackendNotFound"));
        assert_eq!(acceptance::accepted(&p, 2), Some(true));
        assert_eq!(
            acceptance::accepted(&p[..1], 2),
            None,
            "one parent has not said yet"
        );
        let refused = acceptance::parents(Some(&json!({"parents": [{"parentRef": {"name": "gw"},
            "conditions": [{"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners"}]}]})));
        assert_eq!(acceptance::accepted(&refused, 1), Some(false));
        assert!(acceptance::parents(Some(&json!({"parents": 3}))).is_empty());
    }
}
