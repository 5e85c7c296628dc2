//! An in-process fake Kubernetes API server for end-to-end tests and
//! benchmarks of the operator.
//!
//! CI has no cluster, yet the real kube-runtime `Controller` and the real
//! operator binary must run unchanged. This crate serves the Kubernetes REST
//! API (in-process through [`FakeApiServer::client`], or over TCP through
//! [`FakeApiServer::url`]) with the real server's status codes, Status
//! bodies, watch semantics and resourceVersion rules, plus test controls:
//! request counters, fault injection, dropped watches, pauses and restarts.
//! See README.md for what is modelled and what is not.

mod convert;
mod counts;
mod crds;
mod defaults;
mod faults;
mod gc;
mod http;
mod kubeconfig;
mod kubelet;
mod listkeys;
pub mod localhost;
mod meta;
mod ops;
mod patch;
mod pause;
pub mod quantity;
mod resources;
mod selector;
mod server;
mod shared;
pub mod simulator;
mod ssa;
mod status;
mod store;
mod validate;
mod watch;
pub mod weights_server;

pub use counts::{RequestCounts, Verb};
pub use faults::FailRule;
pub use http::LOG_ANNOTATION;
pub use resources::{
    Converter, NameRule, ResourceInfo, ScalePaths, SelectorSource, default_resources,
    model_service, sort_by_priority,
};
pub use server::{Builder, FakeApiServer};
pub use store::{ChangeEvent, EventType};
