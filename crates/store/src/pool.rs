//! Connection pool construction and schema migrations.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{Connection, PgPool};

/// The migrations in `/migrations`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Pool sizing and timeouts.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    /// Largest number of open connections.
    pub max_connections: u32,
    /// How long a query waits for a free connection before failing with 503.
    pub acquire_timeout: Duration,
    /// How long a connection may sit idle and still be handed out without
    /// a round trip to check it is alive (see [`connect`]).
    pub ping_idle: Duration,
    /// Bytes of each payload the ledger keeps, for the rows its triggers
    /// write (the session setting `toolserver.ledger_payload_bytes`).
    pub ledger_payload_bytes: usize,
}

/// Opens a pool to `url` (a `postgres://` URL; `?host=/dir` selects a unix socket).
///
/// A connection handed back to the pool less than `ping_idle` ago is handed
/// out again as it is: the pool's default, a round trip to check every
/// connection before every statement (besides the one the pool makes when a
/// connection is handed back), cost Postgres a tenth of its CPU on a busy
/// server. One idle longer is checked first, and dropped if it no longer
/// answers, as after a restart of Postgres.
pub async fn connect(url: &str, settings: PoolSettings) -> Result<PgPool, sqlx::Error> {
    let payload_bytes = settings.ledger_payload_bytes.to_string();
    let options: PgConnectOptions = url
        .parse::<PgConnectOptions>()?
        .options([("toolserver.ledger_payload_bytes", payload_bytes.as_str())]);
    let ping_idle = settings.ping_idle;
    PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= ping_idle {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_with(options)
        .await
}

/// Applies every pending migration; safe to run from several processes at once.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// How to open connections to a pool's database outside the pool: with
/// the pool's connect options under a name of their own (as seen in
/// `pg_stat_activity`), within the pool's acquire timeout.
#[derive(Debug, Clone)]
pub struct Unpooled {
    options: PgConnectOptions,
    timeout: Duration,
}

impl Unpooled {
    /// Connections beside `pool`, naming themselves `application_name`.
    pub fn new(pool: &PgPool, application_name: &str) -> Self {
        Self {
            options: PgConnectOptions::clone(&pool.connect_options())
                .application_name(application_name),
            timeout: pool.options().get_acquire_timeout(),
        }
    }

    /// The same, with these session settings besides the pool's.
    pub fn with_settings(mut self, settings: &[(&str, &str)]) -> Self {
        self.options = self.options.options(settings.iter().copied());
        self
    }

    /// A new connection, opened within the timeout (else `PoolTimedOut`).
    pub async fn open(&self) -> Result<PgConnection, sqlx::Error> {
        let connecting = PgConnection::connect_with(&self.options);
        tokio::time::timeout(self.timeout, connecting)
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
    }
}
