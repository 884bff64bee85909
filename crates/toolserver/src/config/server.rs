//! Settings of `toolserver serve` (and `toolserver worker`): the listener,
//! and every concern's settings flattened in.

use std::net::SocketAddr;

use clap::Args;
use url::Url;

use super::{
    AccountsConfig, AgentsConfig, AuthConfig, BreakerConfig, BundleConfig, CorsConfig,
    DatabaseConfig, LedgerConfig, LifecycleConfig, LimitsConfig, LogConfig, McpConfig,
    RunnerConfig, StreamsConfig, WebhooksConfig,
};
use crate::metrics_endpoint::MetricsListen;

/// Settings of `toolserver serve`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Server")]
pub struct ServeConfig {
    /// Address and port to listen on.
    #[arg(long, env = "TOOLSERVER_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Base URL clients and runners reach the server at; signed bundle
    /// links start with it. Unset: `http://<bind>`.
    #[arg(long, env = "TOOLSERVER_PUBLIC_URL")]
    pub public_url: Option<Url>,
    /// Where `GET /metrics` (Prometheus text) is served, apart from the
    /// API; `off` for no metrics listener.
    #[arg(
        long,
        env = "TOOLSERVER_METRICS_BIND",
        default_value = "127.0.0.1:9464",
        value_parser = crate::metrics_endpoint::parse_listen
    )]
    pub metrics_bind: MetricsListen,
    /// Seconds in-flight requests get to finish after SIGTERM.
    #[arg(long, env = "TOOLSERVER_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseConfig,
    /// Bundle store settings.
    #[command(flatten)]
    pub bundles: BundleConfig,
    /// Token verification settings.
    #[command(flatten)]
    pub auth: AuthConfig,
    /// Runner settings.
    #[command(flatten)]
    pub runners: RunnerConfig,
    /// Request and upload limits.
    #[command(flatten)]
    pub limits: LimitsConfig,
    /// Agents, models and turns.
    #[command(flatten)]
    pub agents: AgentsConfig,
    /// Detached turns and calls.
    #[command(flatten)]
    pub lifecycle: LifecycleConfig,
    /// Turn streams, NATS and chat WebSockets.
    #[command(flatten)]
    pub streams: StreamsConfig,
    /// Cross-origin access.
    #[command(flatten)]
    pub cors: CorsConfig,
    /// The MCP server and MCP servers agents use.
    #[command(flatten)]
    pub mcp: McpConfig,
    /// Per-account limits and the operator routes.
    #[command(flatten)]
    pub accounts: AccountsConfig,
    /// Webhook delivery.
    #[command(flatten)]
    pub webhooks: WebhooksConfig,
    /// The tool-call ledger.
    #[command(flatten)]
    pub ledger: LedgerConfig,
    /// Circuit breakers.
    #[command(flatten)]
    pub breaker: BreakerConfig,
    /// Logs and traces.
    #[command(flatten)]
    pub log: LogConfig,
}
