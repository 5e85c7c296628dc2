//! The pure core: no I/O, no clock, no randomness.
//!
//! Reconcile, `render` and the benchmarks all run this same code, so what a
//! reviewer sees offline is what the operator applies. Every function here is
//! deterministic in its inputs, which is what keeps status writes (and watch
//! events) from repeating forever.

pub mod canary_wait;
pub mod children;
pub mod conditions;
pub mod convert;
pub mod deployment;
pub mod diagnosis;
pub mod download;
pub mod endpoint_picker;
pub mod fingerprint;
pub mod groups;
pub mod hpa;
pub mod keda;
pub mod labels;
pub mod leader_worker_set;
pub mod model_source;
pub mod multinode;
pub mod ownership;
pub mod pacing;
pub mod pool;
pub mod preset;
pub mod quantity;
pub mod reasons;
pub mod refutation;
pub mod rollback;
pub mod rollout;
pub mod route;
pub mod service;
pub mod status;
pub mod strategy_status;
pub mod subset;
pub mod surge;
pub mod tracks;
pub mod validate;
pub mod weights;

pub use children::{Children, Plan, PoolChildren, Pools, Prior, build_children, plan};
pub use validate::{InvalidSpec, OperatorDefaults, ValidSpec, validate, validate_with};
