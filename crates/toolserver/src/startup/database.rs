//! The database: the configured Postgres, or a private cluster, connected
//! and migrated.

use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use toolserver_store::PoolSettings;

use crate::config::DatabaseConfig;
use crate::embedded_pg::EmbeddedPostgres;

/// A connected, migrated database, and the private cluster behind it if any.
pub(super) struct Database {
    /// The pool.
    pub(super) pool: PgPool,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Closes the pool, then stops the private cluster if there is one.
    pub(super) async fn close(self) {
        self.pool.close().await;
        if let Some(cluster) = self.embedded {
            cluster.stop();
        }
    }
}

/// Connects to the configured database (starting the private cluster when
/// none is) and applies pending migrations; the ledger's triggers keep
/// `ledger_payload_bytes` of each payload.
pub(super) async fn open(
    config: &DatabaseConfig,
    ledger_payload_bytes: usize,
) -> anyhow::Result<Database> {
    let (url, embedded) = match &config.database_url {
        Some(url) => (url.clone(), None),
        None => {
            let (cluster, url) =
                EmbeddedPostgres::start(&config.data_dir, config.postgres_bin_dir.as_deref())
                    .await?;
            (url, Some(cluster))
        }
    };
    let settings = PoolSettings {
        max_connections: config.db_max_connections,
        acquire_timeout: Duration::from_millis(config.db_acquire_timeout_ms),
        ping_idle: Duration::from_millis(config.db_ping_idle_ms),
        ledger_payload_bytes,
    };
    let pool = toolserver_store::connect(&url, settings)
        .await
        .context("connecting to Postgres")?;
    toolserver_store::migrate(&pool)
        .await
        .context("applying migrations")?;
    Ok(Database { pool, embedded })
}
