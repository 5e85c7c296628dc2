//! Server-side defaulting of the built-in types the operator manages.
//!
//! A real server fills in fields nobody sent (`replicas: 1`, container
//! `imagePullPolicy`, a Service's `clusterIP`, ...). An operator that compares
//! what it wants with what it reads back must cope with these, so the fake
//! adds the common ones rather than echoing objects back verbatim.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Map, Value, json};

use crate::meta;
use crate::resources::ResourceInfo;

static NEXT_IP: AtomicU32 = AtomicU32::new(1);

/// A fresh address from 10.96.0.0/12, the usual service CIDR.
fn allocate_cluster_ip() -> String {
    let n = NEXT_IP.fetch_add(1, Ordering::Relaxed);
    format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    m.entry(key.to_string()).or_insert(value);
}

fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    let tag = last
        .split('@')
        .next()
        .unwrap_or(last)
        .split_once(':')
        .map(|(_, t)| t);
    if image.contains('@') {
        "IfNotPresent"
    } else {
        match tag {
            None | Some("latest") => "Always",
            Some(_) => "IfNotPresent",
        }
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else {
        return;
    };
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default(m, "imagePullPolicy", json!(image_pull_policy(&image)));
    set_default(m, "resources", json!({}));
    canonical_resources(m.get_mut("resources"));
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

/// Requests and limits in the form a real server stores them (`1000m` → `1`).
fn canonical_resources(mut resources: Option<&mut Value>) {
    for list in ["requests", "limits"] {
        let Some(q) = resources
            .as_deref_mut()
            .and_then(|r| r.get_mut(list))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        for v in q.values_mut() {
            if let Some(c) = v.as_str().and_then(crate::quantity::canonical) {
                *v = Value::String(c);
            }
        }
    }
}

fn default_pod_spec(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    set_default(m, "restartPolicy", json!("Always"));
    set_default(m, "terminationGracePeriodSeconds", json!(30));
    set_default(m, "dnsPolicy", json!("ClusterFirst"));
    set_default(m, "securityContext", json!({}));
    set_default(m, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
}

fn default_template(spec: &mut Map<String, Value>) {
    if let Some(pod_spec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        default_pod_spec(pod_spec);
    }
}

fn default_service(obj: &mut Value, old: Option<&Value>) {
    let old_spec = old.and_then(|o| o.get("spec"));
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    let external_name = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    if !external_name {
        // Updates keep the allocated address even if the client omitted it.
        for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if !spec.contains_key(key)
                && let Some(v) = old_spec.and_then(|s| s.get(key))
            {
                spec.insert(key.to_string(), v.clone());
            }
        }
        if !spec.contains_key("clusterIP") {
            let ip = allocate_cluster_ip();
            spec.insert("clusterIP".into(), json!(ip));
            spec.insert("clusterIPs".into(), json!([ip]));
        }
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                set_default(p, "targetPort", port);
            }
        }
    }
}

/// Fills in defaults of built-in types; `old` is the stored object on updates.
pub fn apply_defaults(info: &ResourceInfo, obj: &mut Value, old: Option<&Value>) {
    if info.custom {
        return;
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("apps", "deployments") => {
            let spec = obj
                .as_object_mut()
                .map(|m| m.entry("spec").or_insert_with(|| json!({})));
            if let Some(Value::Object(spec)) = spec {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                set_default(
                    spec,
                    "strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
                );
                default_template(spec);
            }
        }
        ("apps", "replicasets") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                set_default(spec, "replicas", json!(1));
                default_template(spec);
            }
        }
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
            }
        }
        ("", "services") => default_service(obj, old),
        ("autoscaling", "horizontalpodautoscalers") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                set_default(spec, "minReplicas", json!(1));
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            crate::crds::apply_defaults(obj, old);
        }
        ("", "namespaces") => {
            let name = meta::name(obj).to_string();
            let labels = meta::meta_mut(obj)
                .entry("labels")
                .or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            if let Some(m) = obj.as_object_mut() {
                let spec = m.entry("spec").or_insert_with(|| json!({}));
                if let Some(s) = spec.as_object_mut() {
                    set_default(s, "finalizers", json!(["kubernetes"]));
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy() {
        assert_eq!(image_pull_policy("nginx"), "Always");
        assert_eq!(image_pull_policy("nginx:latest"), "Always");
        assert_eq!(image_pull_policy("reg:5000/nginx:1.2"), "IfNotPresent");
        assert_eq!(image_pull_policy("reg:5000/nginx"), "Always");
    }
}
