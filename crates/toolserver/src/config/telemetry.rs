//! Logs and traces.

use clap::{Args, ValueEnum};
use url::Url;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with the request span's fields.
    Json,
}

/// Logging and tracing settings.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Logs and traces")]
pub struct LogConfig {
    /// `text` or `json` (JSON lines carry the request span: request id,
    /// method, path, account).
    #[arg(
        long,
        env = "TOOLSERVER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log filter directives, e.g. `info,toolserver_api=debug` (the MCP
    /// library logs every request at info).
    #[arg(long, env = "RUST_LOG", default_value = "info,rmcp=warn")]
    pub log_filter: String,
    /// Base URL of an OTLP/HTTP collector (e.g. `http://collector:4318`);
    /// spans go to `<url>/v1/traces` as protobuf. Unset: no trace export.
    #[arg(long, env = "TOOLSERVER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<Url>,
    /// Which spans are exported, as filter directives apart from `RUST_LOG`.
    #[arg(long, env = "TOOLSERVER_OTLP_FILTER", default_value = "info")]
    pub otlp_filter: String,
    /// The `service.name` of exported traces (e.g. `toolserver-worker` for
    /// workers).
    #[arg(
        long,
        env = "TOOLSERVER_OTLP_SERVICE_NAME",
        default_value = "toolserver"
    )]
    pub otlp_service_name: String,
}
