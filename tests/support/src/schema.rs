//! CRD structural schemas, read from the CRD objects stored in the fake.
//!
//! A real server derives a custom resource's merge semantics (and more) from
//! its CRD's `openAPIV3Schema`. The fake reads them from the stored
//! `CustomResourceDefinition` named `<plural>.<group>` at each request, so a
//! test that installs the CRD gets the real rules and one that never does
//! keeps the fake's rulebook; deleting or changing the CRD takes effect at
//! once, as on a real server.

use serde_json::Value;

use crate::resources::{ResKey, ResourceInfo};
use crate::ssa::fieldset::PathElem;
use crate::store::{ObjKey, Store};

/// The `openAPIV3Schema` of each version of one CRD.
#[derive(Clone, Debug)]
pub struct Schemas {
    /// `(apiVersion, schema)`, the request's version first: a path is
    /// looked up there first, so a field both versions have follows the
    /// request's version.
    versions: Vec<(String, Value)>,
}

impl Schemas {
    /// The schemas of `info`'s CRD as stored, if the CRD is stored and has
    /// any; `api_version` (the request's) comes first.
    pub fn of(store: &Store, info: &ResourceInfo, api_version: &str) -> Option<Schemas> {
        if !info.custom {
            return None;
        }
        let key = ObjKey {
            res: ResKey::new("apiextensions.k8s.io", "customresourcedefinitions"),
            namespace: String::new(),
            name: format!("{}.{}", info.plural, info.group),
        };
        let crd = store.get(&key)?;
        let mut versions: Vec<(String, Value)> = crd
            .pointer("/spec/versions")?
            .as_array()?
            .iter()
            .filter_map(|v| {
                let name = v.get("name")?.as_str()?;
                let schema = v.pointer("/schema/openAPIV3Schema")?;
                Some((info.api_version_at(name), schema.clone()))
            })
            .collect();
        if versions.is_empty() {
            return None;
        }
        versions.sort_by_key(|(av, _)| av != api_version);
        Some(Schemas { versions })
    }

    #[cfg(test)]
    pub fn from_versions(versions: Vec<(String, Value)>) -> Schemas {
        Schemas { versions }
    }

    /// The schema node describing the value at `path`, from the first
    /// version whose schema has it.
    pub fn node_at(&self, path: &[PathElem]) -> Option<&Value> {
        self.versions.iter().find_map(|(_, s)| node_at(s, path))
    }
}

/// The schema node of the value at `path` below `schema`: list items
/// (keyed or set members) are described by `items`, map entries by
/// `properties` or `additionalProperties`.
pub fn node_at<'a>(schema: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = schema;
    for elem in path {
        cur = match elem {
            PathElem::Field(f) => cur
                .get("properties")
                .and_then(|p| p.get(f))
                .or_else(|| cur.get("additionalProperties").filter(|a| a.is_object()))?,
            PathElem::Key(_) | PathElem::Value(_) => cur.get("items")?,
        };
    }
    Some(cur)
}
