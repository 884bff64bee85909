//! The server's pool: a connection is checked before use only once it has
//! sat idle past the pool's threshold.

use std::time::Duration;

use sqlx::PgPool;
use toolserver_store::{connect, PoolSettings};

/// A pool of one connection to `pool`'s database that checks a connection
/// idle for `ping_idle` or longer before handing it out.
async fn server_pool(pool: &PgPool, ping_idle: Duration) -> PgPool {
    let (database,): (String,) = sqlx::query_as("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let (server, _) = base.split_once('?').unwrap_or((&base, ""));
    let (server, _) = server.rsplit_once('/').expect("a database in DATABASE_URL");
    let settings = PoolSettings {
        max_connections: 1,
        acquire_timeout: Duration::from_secs(5),
        ping_idle,
        ledger_payload_bytes: 1024,
    };
    connect(&format!("{server}/{database}"), settings)
        .await
        .unwrap()
}

/// The backend of `servers`' connection, after one statement on it.
async fn backend(servers: &PgPool) -> Result<i32, sqlx::Error> {
    let (pid,): (i32,) = sqlx::query_as("SELECT pg_backend_pid()")
        .fetch_one(servers)
        .await?;
    Ok(pid)
}

/// Waits for `servers`' connection to be back in the pool: the pool checks
/// a connection handed back to it (a round trip) before it keeps it.
async fn back_in_pool(servers: &PgPool) {
    toolserver_testsupport::wait::until("the connection back in the pool", || async {
        servers.num_idle() == 1
    })
    .await;
}

/// Ends backend `pid` from `pool`, and waits for its connection to close.
async fn terminate(pool: &PgPool, pid: i32) {
    let (ended,): (bool,) = sqlx::query_as("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(ended, "backend {pid} ended");
}

#[sqlx::test]
async fn a_connection_idle_past_the_threshold_is_checked_and_replaced_if_postgres_closed_it(
    pool: PgPool,
) {
    let servers = server_pool(&pool, Duration::from_millis(50)).await;
    let first = backend(&servers).await.unwrap();
    back_in_pool(&servers).await;
    terminate(&pool, first).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = backend(&servers)
        .await
        .expect("the closed connection was found out before use and replaced");
    assert_ne!(second, first);
}

#[sqlx::test]
async fn a_connection_back_from_use_within_the_threshold_is_handed_out_unchecked(pool: PgPool) {
    let servers = server_pool(&pool, Duration::from_secs(3600)).await;
    let first = backend(&servers).await.unwrap();
    back_in_pool(&servers).await;
    terminate(&pool, first).await;
    assert!(
        backend(&servers).await.is_err(),
        "no round trip checked the connection before the statement"
    );
    let second = backend(&servers)
        .await
        .expect("the pool dropped the closed connection and opened another");
    assert_ne!(second, first);
}
