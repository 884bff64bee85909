//! The command line: the subcommands and the settings each takes.

use clap::{Parser, Subcommand};

use super::{AuthConfig, DatabaseConfig, EgressProxyConfig, ServeConfig};

/// Multi-tenant tool execution server.
#[derive(Debug, Parser)]
#[command(name = "toolserver", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server (migrating the database first).
    Serve(Box<ServeConfig>),
    /// Run continuations of detached turns and expiry sweeps, without HTTP
    /// (takes the same settings as `serve`).
    Worker(Box<ServeConfig>),
    /// Run the egress proxy Kubernetes runner pods share: public addresses
    /// only, each tool's allow list, under grants the servers sign.
    EgressProxy(Box<EgressProxyConfig>),
    /// Apply pending database migrations and exit.
    Migrate(DatabaseConfig),
    /// Print the OpenAPI document (YAML) of the HTTP API.
    Openapi,
    /// Print the routes page (`docs/routes.md`): every route of the OpenAPI
    /// document with its summary and authentication, in Markdown.
    RoutesDocs,
    /// Print the settings reference (Markdown, `docs/configuration.md`).
    SettingsDocs,
    /// Mint an HS256 bearer token for an account, with the configured secret
    /// (or the development secret in the data directory).
    Token(Box<TokenArgs>),
}

/// Arguments of `toolserver token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// The account the token speaks for.
    #[arg(long)]
    pub account: String,
    /// Lifetime in seconds.
    #[arg(long, default_value_t = 3600)]
    pub ttl_secs: i64,
    /// Token settings.
    #[command(flatten)]
    pub auth: AuthConfig,
    /// Only the data directory is used, to find the development secret.
    #[command(flatten)]
    pub database: DatabaseConfig,
}
