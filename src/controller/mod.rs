//! The I/O around the pure core: observe, apply, report, finalize, events.
//!
//! Every function here reads or writes the cluster; every decision is made by
//! `crate::core`. Errors are one type ([`Error`]) whose kind labels metrics and
//! whose permanence decides between a status condition and a quiet retry.

pub mod apply;
pub mod backoff;
pub mod children;
pub mod context;
pub mod download;
pub mod echoes;
pub mod error;
pub mod event_queue;
pub mod events;
pub mod finalizer;
pub mod freshness;
pub mod gpu_ledger;
pub mod groups;
pub mod guarded;
pub mod invalid;
pub mod lean;
pub mod observe;
pub mod pod_usage;
pub mod pods;
pub mod recent;
pub mod reconcile;
pub mod report;
pub mod surge;
pub mod tracks;
pub mod verified;

pub use children::Stores;
pub use context::{Cache, Context, ControllerConfig, Leadership};
pub use error::Error;
pub use reconcile::{FINALIZER, error_policy, reconcile};
