//! The generic metadata validation every real API server applies.
//!
//! No schema validation happens here (the fake does not know schemas), but
//! object names, label keys/values, owner references and the "no new
//! finalizers while deleting" rule are checked on every type by the real
//! server, and an operator that gets them wrong must fail here too.

use serde_json::Value;

use crate::meta;
use crate::resources::{NameRule, ResourceInfo};
use crate::status::FieldError;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_1123_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS_1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn is_label_1123(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_label_1123)
}

fn is_dns_1035(s: &str) -> bool {
    is_label_1123(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_part(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Checks an object name against the type's naming rule.
pub fn name_errors(rule: NameRule, name: &str) -> Vec<FieldError> {
    let field = "metadata.name";
    let (ok, max, msg) = match rule {
        NameRule::Any => return Vec::new(),
        NameRule::Subdomain => (is_subdomain(name), 253, SUBDOMAIN_MSG),
        NameRule::Label => (is_label_1123(name), 63, LABEL_1123_MSG),
        NameRule::Dns1035 => (is_dns_1035(name), 63, DNS_1035_MSG),
    };
    let mut errs = Vec::new();
    if name.len() > max {
        errs.push(FieldError::invalid(
            field,
            name,
            &format!("must be no more than {max} characters"),
        ));
    }
    if !ok {
        errs.push(FieldError::invalid(field, name, msg));
    }
    errs
}

/// Label or annotation key: optional DNS-subdomain prefix, then a name part.
fn key_errors(field: &str, key: &str) -> Vec<FieldError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut errs = Vec::new();
    if let Some(p) = prefix
        && (!is_subdomain(p) || p.len() > 253)
    {
        errs.push(FieldError::invalid(
            field,
            key,
            &format!("prefix part {SUBDOMAIN_MSG}"),
        ));
    }
    if name.len() > 63 {
        errs.push(FieldError::invalid(
            field,
            key,
            "name part must be no more than 63 characters",
        ));
    }
    if !is_qualified_part(name) {
        errs.push(FieldError::invalid(field, key, QUALIFIED_NAME_MSG));
    }
    errs
}

fn label_errors(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(labels) = meta::labels(obj) else {
        return errs;
    };
    for (k, v) in labels {
        errs.extend(key_errors("metadata.labels", k));
        let Some(v) = v.as_str() else {
            errs.push(FieldError::invalid(
                "metadata.labels",
                k,
                "label values must be strings",
            ));
            continue;
        };
        if v.len() > 63 {
            errs.push(FieldError::invalid(
                "metadata.labels",
                v,
                "must be no more than 63 characters",
            ));
        }
        if !v.is_empty() && !is_qualified_part(v) {
            errs.push(FieldError::invalid("metadata.labels", v, LABEL_VALUE_MSG));
        }
    }
    errs
}

fn annotation_errors(obj: &Value) -> Vec<FieldError> {
    meta::meta(obj)
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .map(|a| {
            a.keys()
                .flat_map(|k| key_errors("metadata.annotations", k))
                .collect()
        })
        .unwrap_or_default()
}

fn owner_ref_errors(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(refs) = meta::meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    else {
        return errs;
    };
    let mut controllers = 0;
    for r in refs {
        for (f, what) in [
            ("apiVersion", "version must not be empty"),
            ("kind", "kind must not be empty"),
            ("name", "name must not be empty"),
            ("uid", "uid must not be empty"),
        ] {
            if r.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
                errs.push(FieldError::invalid(
                    &format!("metadata.ownerReferences.{f}"),
                    "",
                    what,
                ));
            }
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            controllers += 1;
        }
    }
    if controllers > 1 {
        errs.push(FieldError::invalid(
            "metadata.ownerReferences",
            "",
            "Only one reference can have Controller set to true",
        ));
    }
    errs
}

/// Validation of a new object.
pub fn validate_create(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    let mut errs = name_errors(info.name_rule, meta::name(obj));
    errs.extend(label_errors(obj));
    errs.extend(annotation_errors(obj));
    errs.extend(owner_ref_errors(obj));
    errs.extend(type_errors(info, obj));
    errs
}

/// Checks of particular types, beyond metadata.
fn type_errors(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    if crate::crds::is_crd_type(&info.key()) {
        crate::crds::validate(obj)
    } else {
        Vec::new()
    }
}

/// Validation of a change to an existing object.
pub fn validate_update(info: &ResourceInfo, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = label_errors(new);
    errs.extend(annotation_errors(new));
    errs.extend(owner_ref_errors(new));
    errs.extend(type_errors(info, new));
    if meta::is_deleting(old) {
        let before = meta::finalizers(old);
        let added: Vec<String> = meta::finalizers(new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    added
                        .iter()
                        .map(|f| format!("{f:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert!(name_errors(NameRule::Subdomain, "a.b-c").is_empty());
        assert!(!name_errors(NameRule::Subdomain, "Upper").is_empty());
        assert!(!name_errors(NameRule::Dns1035, "1abc").is_empty());
        assert_eq!(name_errors(NameRule::Label, &"a".repeat(64)).len(), 1);
    }

    #[test]
    fn labels() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "e": ""}}});
        assert!(label_errors(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"a": "has space"}}});
        assert_eq!(label_errors(&bad).len(), 1);
        let long = json!({"metadata": {"labels": {"a": "x".repeat(64)}}});
        assert_eq!(label_errors(&long).len(), 1);
    }
}
