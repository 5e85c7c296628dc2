//! Reading and writing `metadata.managedFields`.
//!
//! Ownership lives inside the stored object, as on a real server, so clients
//! see the same `managedFields` shape (manager, operation, apiVersion, time,
//! fieldsType FieldsV1, fieldsV1, subresource) and nothing is kept on the side.

use serde_json::{Map, Value, json};

use super::fieldset::FieldSet;
use crate::meta::{meta, meta_mut};

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    /// `""`, `status` or `scale`.
    pub subresource: String,
    pub time: String,
    pub fields: FieldSet,
}

impl Entry {
    pub fn new(manager: &str, operation: &str, api_version: &str, subresource: &str) -> Self {
        Entry {
            manager: manager.into(),
            operation: operation.into(),
            api_version: api_version.into(),
            subresource: subresource.into(),
            time: String::new(),
            fields: FieldSet::default(),
        }
    }

    /// Whether this entry is the one identified by these values. Apply
    /// entries are per manager+subresource; Update entries also per version.
    pub fn is(&self, manager: &str, operation: &str, api_version: &str, subresource: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == "Apply" || self.api_version == api_version)
    }
}

/// Entries of an object (malformed ones are skipped).
pub fn read(obj: &Value) -> Vec<Entry> {
    let Some(list) = meta(obj)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            Some(Entry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                subresource: s("subresource"),
                time: s("time"),
                fields: FieldSet::from_fields_v1(e.get("fieldsV1")?),
            })
        })
        .collect()
}

/// Replaces the entries of an object; entries owning nothing are dropped.
pub fn write(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut m = Map::new();
            m.insert("manager".into(), json!(e.manager));
            m.insert("operation".into(), json!(e.operation));
            m.insert("apiVersion".into(), json!(e.api_version));
            m.insert("time".into(), json!(e.time));
            m.insert("fieldsType".into(), json!("FieldsV1"));
            m.insert("fieldsV1".into(), e.fields.to_fields_v1());
            if !e.subresource.is_empty() {
                m.insert("subresource".into(), json!(e.subresource));
            }
            Value::Object(m)
        })
        .collect();
    let m = meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}
