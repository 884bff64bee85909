//! Connection pool construction and schema migrations.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

/// The migrations in `/migrations`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Pool sizing and timeouts.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    /// Largest number of open connections.
    pub max_connections: u32,
    /// How long a query waits for a free connection before failing with 503.
    pub acquire_timeout: Duration,
    /// Bytes of each payload the ledger keeps, for the rows its triggers
    /// write (the session setting `toolserver.ledger_payload_bytes`).
    pub ledger_payload_bytes: usize,
}

/// Opens a pool to `url` (a `postgres://` URL; `?host=/dir` selects a unix socket).
pub async fn connect(url: &str, settings: PoolSettings) -> Result<PgPool, sqlx::Error> {
    let payload_bytes = settings.ledger_payload_bytes.to_string();
    let options: PgConnectOptions = url
        .parse::<PgConnectOptions>()?
        .options([("toolserver.ledger_payload_bytes", payload_bytes.as_str())]);
    PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        .connect_with(options)
        .await
}

/// Applies every pending migration; safe to run from several processes at once.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}
