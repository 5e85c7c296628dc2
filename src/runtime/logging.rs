//! Structured logs: JSON for log pipelines (the container default), text for
//! people. The level comes from --log-level, else RUST_LOG, else info.

use tracing_subscriber::EnvFilter;

use super::cli::LogFormat;

/// Installs the global subscriber. Errors if the filter does not parse.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    let filter = match level {
        Some(l) => EnvFilter::try_new(l).map_err(|e| format!("--log-level {l:?}: {e}"))?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| format!("logging: {e}"))
}
