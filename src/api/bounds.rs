//! The size bounds of the schema's strings and lists, for both versions.
//!
//! Everything in a ModelService is user input, and every byte of it is
//! held by the operator's cache and copied into its children, so nothing is
//! unbounded. The sizes come from what real serving command lines need
//! (docs/security.md has the table): they are far above any real use and
//! far below the API server's 3 MiB request limit.

/// `model.name`: a Hugging Face repository id is at most 96 + 1 + 96
/// characters; a local path or a URI may be longer.
pub const MODEL_NAME: u32 = 512;
/// `model.version`: a git ref or commit (a branch name may be 255).
pub const VERSION: u32 = 255;
/// An image reference: a registry host (253), a repository path (255), a
/// tag (128) and a digest (71) fit.
pub const IMAGE: u32 = 1024;
/// `runtime.args`: vLLM's `--help` lists about 190 flags; real command
/// lines use 5 to 40 arguments.
pub const ARGS: u32 = 256;
/// One argument: an inline `--chat-template` (Llama 3.1's is 4.5 kB) or a
/// JSON `--hf-overrides`/`--compilation-config` runs to several kB.
pub const ARG: u32 = 16_384;
/// `runtime.env` entries.
pub const ENV: u32 = 128;
/// `resources.gpuResource`: a qualified name (a 253-character prefix, a
/// slash and a 63-character name).
pub const RESOURCE_NAME: u32 = 317;
/// `scheduling.tolerations` entries.
pub const TOLERATIONS: u32 = 64;
/// `autoscaling.metric`: a Prometheus metric name.
pub const METRIC: u32 = 256;
/// `autoscaling.keda.prometheus.address`: a URL.
pub const URL: u32 = 2048;
/// A DNS name (a hostname, an object name).
pub const DNS_NAME: u32 = 253;
/// A DNS label (a namespace, a kind).
pub const DNS_LABEL: u32 = 63;
