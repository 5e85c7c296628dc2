//! Process wiring: CLI, the Controller and its watches, leader election, the
//! HTTP server, signals and logs. No reconcile logic lives here.

pub mod api_requests;
pub mod api_retry;
pub mod cli;
pub mod client;
pub mod code_pages;
pub mod convert_manifests;
pub mod discovery;
pub mod http;
pub mod in_flight;
pub mod leader;
pub mod logging;
pub mod manifests;
pub mod reflect;
pub mod render;
pub mod run;
pub mod shutdown;
pub mod startup;
pub mod storage_migration;
pub mod watches;
