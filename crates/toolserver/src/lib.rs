//! The toolserver program: configuration, startup and subcommands. `main.rs`
//! only parses the command line and environment
//! ([`config::parse_or_exit`]) and calls [`run`].

pub mod cli;
pub mod config;
pub mod embedded_pg;
pub mod keys;
pub mod metrics_endpoint;
pub mod routes_docs;
pub mod runner_isolation;
pub mod startup;
pub mod telemetry;

pub use cli::{run, Cli};
