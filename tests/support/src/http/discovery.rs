//! Non-resource endpoints: `/version`, health checks and API discovery.
//!
//! Clients probe these (`Client::apiserver_version`, kube's `Discovery`);
//! discovery is generated from the resource table so an uninstalled CRD
//! disappears from it just like from a real server.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::resources::{ResourceInfo, sort_by_priority};
use crate::status::{json_response, page_not_found};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_entries(info: &ResourceInfo) -> Vec<Value> {
    let mut out = vec![json!({
        "name": info.plural,
        "singularName": info.kind.to_lowercase(),
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": VERBS,
    })];
    if info.status_subresource {
        out.push(json!({
            "name": format!("{}/status", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if info.scale.is_some() {
        out.push(json!({
            "name": format!("{}/scale", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

/// A group's versions (every version any of its types serves) in
/// Kubernetes-aware priority order; the first is the preferred version, as
/// the apiextensions server picks it for a CRD's group.
fn group_entry(group: &str, infos: &[ResourceInfo]) -> Value {
    let mut versions: Vec<String> = Vec::new();
    for i in infos.iter().filter(|i| i.group == group) {
        for v in &i.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    sort_by_priority(&mut versions);
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or_else(|| json!({}));
    json!({"name": group, "versions": entries, "preferredVersion": preferred})
}

/// Answers a non-resource path, or `None` if `path` is a resource URL.
pub fn serve(path: &str, infos: &[ResourceInfo]) -> Option<Response> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ok = |body: Value| Some(json_response(StatusCode::OK, &body));
    match segs.as_slice() {
        ["version"] => ok(json!({
            "major": "1", "minor": "37", "gitVersion": "v1.37.0-fake",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0",
            "compiler": "gc", "platform": "linux/amd64",
        })),
        ["healthz"] | ["livez"] | ["readyz"] => Some((StatusCode::OK, "ok").into_response()),
        ["api"] => ok(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
        })),
        ["apis"] => {
            // A CRD that serves no version puts nothing into discovery.
            let groups: BTreeSet<&str> = infos
                .iter()
                .filter(|i| !i.group.is_empty() && !i.versions.is_empty())
                .map(|i| i.group.as_str())
                .collect();
            let list: Vec<Value> = groups.iter().map(|g| group_entry(g, infos)).collect();
            ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list}))
        }
        ["api", v] | ["apis", _, v] => {
            let group = if segs[0] == "api" { "" } else { segs[1] };
            let resources: Vec<Value> = infos
                .iter()
                .filter(|i| i.group == group && i.serves(v))
                .flat_map(resource_entries)
                .collect();
            if resources.is_empty() {
                return Some(page_not_found());
            }
            let gv = if group.is_empty() {
                v.to_string()
            } else {
                format!("{group}/{v}")
            };
            ok(
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
            )
        }
        ["apis", g] => {
            if !infos
                .iter()
                .any(|i| i.group == *g && !i.versions.is_empty())
            {
                return Some(page_not_found());
            }
            let mut group = group_entry(g, infos);
            if let Some(m) = group.as_object_mut() {
                m.insert("kind".into(), json!("APIGroup"));
                m.insert("apiVersion".into(), json!("v1"));
            }
            ok(group)
        }
        _ => None,
    }
}
