//! The verbs, as synchronous functions over a locked [`Store`].
//!
//! HTTP parsing and response writing live in `http`; these functions hold
//! the API semantics (preconditions, subresource isolation, generation,
//! finalizers, field ownership) and are callable by in-crate code that wants
//! the exact same rules (the garbage collector does).

pub mod apply;
pub mod create;
pub mod delete;
pub mod patch;
pub mod read;
pub mod scale;
pub mod update;

use std::sync::Arc;

use serde_json::Value;

use crate::resources::ResourceInfo;
use crate::status::ApiError;
use crate::store::{ObjKey, Store};

/// Which endpoint of an object a request targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
    Scale,
}

impl Sub {
    /// As recorded in `managedFields[].subresource`.
    pub fn as_str(self) -> &'static str {
        match self {
            Sub::Main => "",
            Sub::Status => "status",
            Sub::Scale => "scale",
        }
    }
}

/// Everything a verb needs to know about the request besides its body.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub info: Arc<ResourceInfo>,
    /// `""` for cluster-scoped types.
    pub namespace: String,
    pub sub: Sub,
    /// `fieldManager`, or the user-agent-derived default.
    pub manager: String,
    /// Whether `fieldManager` was given explicitly (apply requires it).
    pub manager_given: bool,
    pub dry_run: bool,
    /// `apiVersion` of the request's version: what bodies must say, what
    /// responses say, and what `managedFields` entries record.
    pub api_version: String,
    /// `apiVersion` of the storage version.
    pub storage_api_version: String,
}

impl Ctx {
    /// A request at the storage version; see [`Self::at_version`].
    pub fn new(info: Arc<ResourceInfo>, namespace: &str, sub: Sub, manager: &str) -> Self {
        Ctx {
            api_version: info.api_version(),
            storage_api_version: info.api_version(),
            info,
            namespace: namespace.to_string(),
            sub,
            manager: manager.to_string(),
            manager_given: true,
            dry_run: false,
        }
    }

    /// The same request at another served version of the type.
    pub fn at_version(mut self, version: &str) -> Self {
        self.api_version = self.info.api_version_at(version);
        self
    }

    /// A stored object as the request's version shows it.
    pub fn to_request(&self, stored: &Arc<Value>) -> Result<Arc<Value>, ApiError> {
        crate::convert::to_version(&self.info, stored, &self.api_version)
    }

    /// An object of the request's version as it is stored.
    pub fn to_storage(&self, obj: Value) -> Result<Value, ApiError> {
        crate::convert::convert(&self.info, obj, &self.storage_api_version)
    }

    /// The stored object `name` and the request version's view of it.
    pub fn load(&self, store: &Store, name: &str) -> Result<Current, ApiError> {
        let stored = store
            .get(&self.key(name))
            .ok_or_else(|| ApiError::not_found(&self.info, name))?;
        let view = self.to_request(&stored)?;
        Ok(Current { stored, view })
    }

    /// The same request against another endpoint of the object.
    pub fn with_sub(&self, sub: Sub) -> Self {
        Ctx {
            sub,
            ..self.clone()
        }
    }

    pub fn key(&self, name: &str) -> ObjKey {
        ObjKey {
            res: self.info.key(),
            namespace: self.namespace.clone(),
            name: name.to_string(),
        }
    }

    pub fn views(&self) -> crate::convert::Views<'_> {
        crate::convert::Views { info: &self.info }
    }

    pub fn writer<'a>(
        &'a self,
        views: &'a crate::convert::Views<'a>,
    ) -> crate::ssa::track::Writer<'a> {
        crate::ssa::track::Writer {
            manager: &self.manager,
            api_version: &self.api_version,
            subresource: self.sub.as_str(),
            views,
        }
    }
}

/// An existing object as a write finds it.
pub struct Current {
    /// As stored (storage version).
    pub stored: Arc<Value>,
    /// As the request's version shows it: what patches apply to and what
    /// the update rules compare against.
    pub view: Arc<Value>,
}
