//! Field selector parsing and matching.
//!
//! The real server supports `metadata.name` and `metadata.namespace` for every
//! type plus a per-type list; other fields are a 400, which the fake mirrors
//! so an operator relying on an unsupported selector fails here too.

use serde_json::Value;

use crate::resources::ResourceInfo;

#[derive(Clone, Debug, PartialEq)]
struct Term {
    field: String,
    value: String,
    negate: bool,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<Term>,
}

impl FieldSelector {
    /// Parses `a=b,c!=d`, rejecting fields `info` does not support.
    pub fn parse(s: &str, info: &ResourceInfo) -> Result<Self, String> {
        let mut terms = Vec::new();
        for raw in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, value, negate) = if let Some((f, v)) = raw.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = raw.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = raw.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{raw}'; can't understand '{raw}'"
                ));
            };
            let field = field.trim();
            let supported = matches!(field, "metadata.name" | "metadata.namespace")
                || info.field_selectors.iter().any(|f| f == field);
            if !supported {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push(Term {
                field: field.to_string(),
                value: value.trim().to_string(),
                negate,
            });
        }
        Ok(FieldSelector { terms })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|t| {
            let actual = match crate::meta::get_path(obj, &t.field) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == t.value) != t.negate
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn name_and_namespace() {
        let info = crate::resources::ResourceInfo::new("", "v1", "configmaps", "ConfigMap");
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let sel = FieldSelector::parse("metadata.name=a,metadata.namespace==ns", &info).unwrap();
        assert!(sel.matches(&obj));
        let sel = FieldSelector::parse("metadata.name!=a", &info).unwrap();
        assert!(!sel.matches(&obj));
        assert_eq!(
            FieldSelector::parse("spec.x=1", &info).unwrap_err(),
            "field label not supported: spec.x"
        );
    }
}
