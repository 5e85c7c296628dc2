//! The part of the apiextensions validation of a CRD that serving its type
//! depends on: what a real server refuses with 422 and the fake could not
//! derive a type from (name, group, scope, names, versions, scale paths).
//! Schemas, printer columns, CEL rules and conversion settings are not
//! checked. Messages are the real server's; where it quotes a Go value of
//! the versions list, per-version schemas and subresources show as `nil`,
//! as the real server shows them when all versions share them.

use serde_json::Value;

use super::{storage_version, str_at, versions};
use crate::meta;
use crate::resources::NameRule;
use crate::status::FieldError;
use crate::validate::name_errors;

/// Groups that need an approval annotation, as upstream protects them.
fn protected(group: &str) -> bool {
    group == "k8s.io"
        || group == "kubernetes.io"
        || group.ends_with(".k8s.io")
        || group.ends_with(".kubernetes.io")
}

const APPROVAL: &str = "api-approved.kubernetes.io";

fn required(field: &str) -> FieldError {
    FieldError {
        field: field.into(),
        reason: "FieldValueRequired",
        message: "Required value".into(),
    }
}

/// `name_errors` for a field other than `metadata.name`.
fn dns1035(field: &str, value: &str) -> Vec<FieldError> {
    name_errors(NameRule::Dns1035, value)
        .into_iter()
        .map(|e| FieldError {
            field: field.into(),
            ..e
        })
        .collect()
}

/// The versions list as Go's `%#v` prints it in the real messages.
fn go_versions(spec: Option<&Value>) -> String {
    const T: &str = "apiextensions.CustomResourceDefinitionVersion";
    let Some(list) = spec
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
    else {
        return format!("[]{T}(nil)");
    };
    let items: Vec<String> = list
        .iter()
        .map(|v| {
            let b = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
            format!(
                "{T}{{Name:{}, Served:{}, Storage:{}, Deprecated:{}, DeprecationWarning:(*string)(nil), \
                 Schema:(*apiextensions.CustomResourceValidation)(nil), \
                 Subresources:(*apiextensions.CustomResourceSubresources)(nil), \
                 AdditionalPrinterColumns:[]apiextensions.CustomResourceColumnDefinition(nil), \
                 SelectableFields:[]apiextensions.SelectableField(nil)}}",
                Value::from(v.get("name").and_then(Value::as_str).unwrap_or("")),
                b("served"),
                b("storage"),
                b("deprecated"),
            )
        })
        .collect();
    format!("[]{T}{{{}}}", items.join(", "))
}

fn invalid_versions(spec: Option<&Value>, detail: &str) -> FieldError {
    FieldError {
        field: "spec.versions".into(),
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {}: {detail}", go_versions(spec)),
    }
}

/// One scale path: present, a simple path, under the right fields.
fn scale_path(
    errs: &mut Vec<FieldError>,
    field: String,
    path: Option<&str>,
    under: &[&str],
    detail: &str,
) {
    let Some(path) = path else {
        errs.push(required(&field));
        return;
    };
    if !path.starts_with('.') {
        errs.push(FieldError::invalid(
            &field,
            path,
            "must be a simple json path starting with .",
        ));
    } else if !under.iter().any(|u| path.starts_with(u)) {
        errs.push(FieldError::invalid(&field, path, detail));
    }
}

fn scale_errors(errs: &mut Vec<FieldError>, at: &str, scale: &Value) {
    let path = |k: &str| str_at(scale, k);
    scale_path(
        errs,
        format!("{at}.specReplicasPath"),
        path("specReplicasPath"),
        &[".spec."],
        "should be a json path under .spec",
    );
    scale_path(
        errs,
        format!("{at}.statusReplicasPath"),
        path("statusReplicasPath"),
        &[".status."],
        "should be a json path under .status",
    );
    if let Some(p) = path("labelSelectorPath") {
        scale_path(
            errs,
            format!("{at}.labelSelectorPath"),
            Some(p),
            &[".spec.", ".status."],
            "should be a json path under either .spec or .status",
        );
    }
}

/// Errors of a CRD as written (after defaulting).
pub fn validate(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = crd.get("spec");
    let at = |k: &str| spec.and_then(|s| str_at(s, k));
    let names = spec.and_then(|s| s.get("names"));
    let name_at = |k: &str| names.and_then(|n| str_at(n, k));
    let group = at("group");
    let plural = name_at("plural");

    let name = meta::name(crd);
    if Some(name.to_string()) != plural.zip(group).map(|(p, g)| format!("{p}.{g}")) {
        errs.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match group {
        None => errs.push(required("spec.group")),
        Some(g) if !g.contains('.') => errs.push(FieldError::invalid(
            "spec.group",
            g,
            "should be a domain with at least one dot",
        )),
        Some(g) => {
            errs.extend(
                name_errors(NameRule::Subdomain, g)
                    .into_iter()
                    .map(|e| FieldError {
                        field: "spec.group".into(),
                        ..e
                    }),
            );
            let approved = meta::meta(crd)
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get(APPROVAL))
                .is_some();
            if protected(g) && !approved {
                errs.push(FieldError::required(
                    &format!("metadata.annotations[{APPROVAL}]"),
                    &format!(
                        "protected groups must have approval annotation \"{APPROVAL}\", see https://github.com/kubernetes/enhancements/pull/1111"
                    ),
                ));
            }
        }
    }
    match at("scope") {
        None => errs.push(required("spec.scope")),
        Some("Namespaced" | "Cluster") => {}
        Some(other) => errs.push(FieldError {
            field: "spec.scope".into(),
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                Value::from(other)
            ),
        }),
    }

    let list = versions(crd);
    let storages = list
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storages != 1 {
        errs.push(invalid_versions(
            spec,
            "must have exactly one version marked as storage version",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if list
        .iter()
        .any(|v| !seen.insert(v.get("name").and_then(Value::as_str).unwrap_or("")))
    {
        errs.push(invalid_versions(spec, "must contain unique version names"));
    }
    for (i, v) in list.iter().enumerate() {
        match str_at(v, "name") {
            None => errs.push(required(&format!("spec.versions[{i}].name"))),
            Some(n) => {
                errs.extend(dns1035(&format!("spec.versions[{i}].name"), n));
                if i == 0 {
                    // The internal form also carries the first version as
                    // `spec.version`, and validates it again.
                    errs.extend(dns1035("spec.version", n));
                }
            }
        }
    }
    let shared = list
        .windows(2)
        .all(|w| w[0].get("subresources") == w[1].get("subresources"));
    for (i, v) in list.iter().enumerate() {
        let Some(scale) = v.get("subresources").and_then(|s| s.get("scale")) else {
            continue;
        };
        if !scale.is_object() {
            continue;
        }
        if shared {
            // Identical per-version subresources are one top-level field
            // inside the server, and its errors say so.
            scale_errors(&mut errs, "spec.subresources.scale", scale);
            break;
        }
        scale_errors(
            &mut errs,
            &format!("spec.versions[{i}].subresources.scale"),
            scale,
        );
    }

    match plural {
        None => errs.push(required("spec.names.plural")),
        Some(p) => errs.extend(dns1035("spec.names.plural", p)),
    }
    match name_at("singular") {
        None => errs.push(required("spec.names.singular")),
        Some(s) => errs.extend(dns1035("spec.names.singular", s)),
    }
    for k in ["kind", "listKind"] {
        if name_at(k).is_none() {
            errs.push(required(&format!("spec.names.{k}")));
        }
    }

    let stored = crd
        .get("status")
        .and_then(|s| s.get("storedVersions"))
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    if !stored && storage_version(crd).is_none() {
        errs.push(FieldError {
            field: "status.storedVersions".into(),
            reason: "FieldValueInvalid",
            message: "Invalid value: []string(nil): must have at least one stored version".into(),
        });
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(crd: &Value) -> Vec<String> {
        validate(crd).into_iter().map(|e| e.field).collect()
    }

    fn good() -> Value {
        let mut c = json!({
            "metadata": {"name": "widgets.diff.example.dev"},
            "spec": {"group": "diff.example.dev", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"scale": {"specReplicasPath": ".spec.replicas",
                                               "statusReplicasPath": ".status.replicas"}}}]},
        });
        super::super::apply_defaults(&mut c, None);
        c
    }

    #[test]
    fn a_valid_crd_passes() {
        assert_eq!(validate(&good()), []);
    }

    #[test]
    fn an_empty_crd_fails_like_the_real_server() {
        let errs = validate(&json!({"metadata": {"name": "widgets.diff.example.dev"}}));
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.group",
                "spec.scope",
                "spec.versions",
                "spec.names.plural",
                "spec.names.singular",
                "spec.names.kind",
                "spec.names.listKind",
                "status.storedVersions"
            ]
        );
        assert_eq!(
            errs[3].message,
            "Invalid value: []apiextensions.CustomResourceDefinitionVersion(nil): must have exactly one version marked as storage version"
        );
    }

    #[test]
    fn storage_versions_scale_paths_and_groups() {
        let mut c = good();
        c["spec"]["versions"][0]["storage"] = json!(false);
        assert_eq!(fields(&c), ["spec.versions"]);
        assert!(validate(&c)[0].message.starts_with(
            "Invalid value: []apiextensions.CustomResourceDefinitionVersion{apiextensions.CustomResourceDefinitionVersion{Name:\"v1\", Served:true, Storage:false,"
        ));

        let mut c = good();
        c["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] = json!("spec.r");
        let errs = validate(&c);
        assert_eq!(
            errs[0].message,
            "Invalid value: \"spec.r\": must be a simple json path starting with ."
        );
        assert_eq!(errs[0].field, "spec.subresources.scale.specReplicasPath");

        let mut c = good();
        c["spec"]["group"] = json!("nodot");
        c["metadata"]["name"] = json!("widgets.nodot");
        assert_eq!(
            validate(&c)[0].message,
            "Invalid value: \"nodot\": should be a domain with at least one dot"
        );

        let mut c = good();
        c["spec"]["group"] = json!("x.k8s.io");
        c["metadata"]["name"] = json!("widgets.x.k8s.io");
        assert_eq!(
            fields(&c),
            ["metadata.annotations[api-approved.kubernetes.io]"]
        );
    }
}
