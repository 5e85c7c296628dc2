//! modelservice-operator: runs AI model-serving workloads on GPU clusters.
//!
//! Layout (see ../shared/DESIGN.md):
//! - [`api`]: the `ModelService` custom resource types (the CRD is generated from them).
//! - [`core`]: the pure core: validate a spec, build the desired children, compute status.
//!   No I/O, so it is what `render` prints and what most tests exercise.
//! - [`controller`]: the I/O around the core: observe, apply, report, finalize, events.
//! - [`metrics`]: the Prometheus metrics, written by the controller and the wiring alike.
//! - [`runtime`]: process wiring: CLI, Controller, leader election, HTTP, signals, logs.
//! - [`webhook`]: the CRD conversion webhook (HTTPS), its certificates and the CRD's clientConfig.
//! - [`permissions`]: the RBAC the operator needs, from which every RBAC file is generated.

pub mod api;
pub mod controller;
pub mod core;
pub mod fetch;
pub mod metrics;
pub mod permissions;
pub mod runtime;
pub mod webhook;
