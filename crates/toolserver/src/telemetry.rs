//! Structured logging through `tracing`; every line inside a request carries
//! the request span (request id, method, path, account).

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber.
pub fn init(config: &LogConfig) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log_filter)
        .map_err(|err| anyhow::anyhow!("RUST_LOG is not a valid filter: {err}"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let result = match config.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    result.map_err(|err| anyhow::anyhow!("logging already initialised: {err}"))
}
