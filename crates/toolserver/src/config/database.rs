//! Where Postgres is, and the local state directory.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use toolserver_store::DedicatedSettings;

use super::parse::within;

/// Where Postgres is.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Database")]
pub struct DatabaseConfig {
    /// Postgres URL. Unset: a private cluster is started under the data
    /// directory with the machine's PostgreSQL binaries.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Directory for local state: the private cluster, the filesystem bundle
    /// store, development keys.
    #[arg(long, env = "TOOLSERVER_DATA_DIR", default_value = ".toolserver")]
    pub data_dir: PathBuf,
    /// Directory with `initdb` and `pg_ctl` for the private cluster. Unset:
    /// the newest `/usr/lib/postgresql/<version>/bin`, then `PATH`.
    #[arg(long, env = "TOOLSERVER_POSTGRES_BIN_DIR")]
    pub postgres_bin_dir: Option<PathBuf>,
    /// Largest number of pooled connections.
    #[arg(
        long,
        env = "TOOLSERVER_DB_MAX_CONNECTIONS",
        default_value_t = 10,
        value_parser = within::<u32>(1..)
    )]
    pub db_max_connections: u32,
    /// Milliseconds a query waits for a pooled connection before answering 503.
    #[arg(long, env = "TOOLSERVER_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 5000)]
    pub db_acquire_timeout_ms: u64,
    /// Milliseconds a pooled connection may sit idle and still be handed
    /// out without a round trip to check it is alive; one idle longer is
    /// checked first (0: every connection, every time).
    #[arg(long, env = "TOOLSERVER_DB_PING_IDLE_MS", default_value_t = 1000)]
    pub db_ping_idle_ms: u64,
    /// Connections kept besides the pool for every turn's first and last
    /// writes, given back after each without the round trip the pool makes
    /// to check a connection it gets back; when all are in use, a turn
    /// uses the pool (0: turns always do).
    #[arg(
        long,
        env = "TOOLSERVER_DB_TURN_CONNECTIONS",
        default_value_t = DedicatedSettings::DEFAULT.connections
    )]
    pub db_turn_connections: usize,
}

impl DatabaseConfig {
    /// The settings of the connections turns start and end on.
    pub fn turn_connections(&self) -> DedicatedSettings {
        DedicatedSettings {
            connections: self.db_turn_connections,
            ping_idle: Duration::from_millis(self.db_ping_idle_ms),
        }
    }
}
