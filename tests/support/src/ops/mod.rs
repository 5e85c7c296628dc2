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

use crate::resources::ResourceInfo;
use crate::store::ObjKey;

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
    /// `info.api_version()`, kept for borrowing into `managedFields`.
    pub api_version: String,
}

impl Ctx {
    pub fn new(info: Arc<ResourceInfo>, namespace: &str, sub: Sub, manager: &str) -> Self {
        Ctx {
            api_version: info.api_version(),
            info,
            namespace: namespace.to_string(),
            sub,
            manager: manager.to_string(),
            manager_given: true,
            dry_run: false,
        }
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

    pub fn writer(&self) -> crate::ssa::track::Writer<'_> {
        crate::ssa::track::Writer {
            manager: &self.manager,
            api_version: &self.api_version,
            subresource: self.sub.as_str(),
        }
    }
}
