//! The connections turns start and end on: one given back after its work
//! serves the next, one whose work failed or was abandoned is closed, the
//! pool serves whatever finds them all in use, and one idle past the
//! threshold is checked before use.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use toolserver_store::dedicated::DEDICATED_APPLICATION_NAME;
use toolserver_store::{DedicatedConnections, DedicatedSettings, StoreError};

/// A set of at most `connections` to `pool`'s database.
fn set(pool: &PgPool, connections: usize, ping_idle: Duration) -> DedicatedConnections {
    DedicatedConnections::new(
        pool.clone(),
        DedicatedSettings {
            connections,
            ping_idle,
        },
    )
}

/// The backend of `connection` and the name it gave Postgres.
async fn backend(connection: &mut PgConnection) -> Result<(i32, String), sqlx::Error> {
    sqlx::query_as("SELECT pg_backend_pid(), current_setting('application_name')")
        .fetch_one(connection)
        .await
}

/// Whether backend `pid` is still connected.
async fn connected(pool: &PgPool, pid: i32) -> bool {
    let (found,): (bool,) =
        sqlx::query_as("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
            .bind(pid)
            .fetch_one(pool)
            .await
            .unwrap();
    found
}

async fn closed(pool: &PgPool, pid: i32) {
    toolserver_testsupport::wait::until("the connection closed", || async {
        !connected(pool, pid).await
    })
    .await;
}

const SUCCEEDED: Result<(), StoreError> = Ok(());

#[sqlx::test]
async fn a_connection_given_back_after_its_work_serves_the_next(pool: PgPool) {
    let turns = set(&pool, 1, Duration::from_secs(3600));
    let mut held = turns.take().await.unwrap();
    let (first, name) = backend(held.connection()).await.unwrap();
    assert_eq!(name, DEDICATED_APPLICATION_NAME);
    held.done(&SUCCEEDED);

    let mut held = turns.take().await.unwrap();
    assert_eq!(backend(held.connection()).await.unwrap().0, first);
    // A refusal Postgres answered leaves the connection as good as before.
    held.done(&Err::<(), _>(StoreError::Conflict {
        constraint: "busy".into(),
    }));
    let mut held = turns.take().await.unwrap();
    assert_eq!(backend(held.connection()).await.unwrap().0, first);
}

#[sqlx::test]
async fn a_connection_whose_work_failed_or_was_abandoned_is_closed(pool: PgPool) {
    let turns = set(&pool, 1, Duration::from_secs(3600));
    let mut held = turns.take().await.unwrap();
    let (first, _) = backend(held.connection()).await.unwrap();
    held.done(&Err::<(), _>(StoreError::Unavailable(
        sqlx::Error::PoolTimedOut,
    )));
    closed(&pool, first).await;

    let mut held = turns.take().await.unwrap();
    let (second, name) = backend(held.connection()).await.unwrap();
    assert_ne!(second, first);
    assert_eq!(name, DEDICATED_APPLICATION_NAME, "a new one took its place");
    drop(held);
    closed(&pool, second).await;
    let mut held = turns.take().await.unwrap();
    assert_ne!(backend(held.connection()).await.unwrap().0, second);
}

#[sqlx::test]
async fn the_pool_serves_work_that_finds_every_connection_in_use(pool: PgPool) {
    let turns = set(&pool, 1, Duration::from_secs(3600));
    let mut first = turns.take().await.unwrap();
    let mut second = turns.take().await.unwrap();
    let (_, name) = backend(first.connection()).await.unwrap();
    assert_eq!(name, DEDICATED_APPLICATION_NAME);
    let (_, name) = backend(second.connection()).await.unwrap();
    assert_ne!(name, DEDICATED_APPLICATION_NAME, "one of the pool");

    let none = set(&pool, 0, Duration::from_secs(3600));
    let mut held = none.take().await.unwrap();
    let (_, name) = backend(held.connection()).await.unwrap();
    assert_ne!(name, DEDICATED_APPLICATION_NAME);
}

#[sqlx::test]
async fn a_connection_idle_past_the_threshold_is_checked_and_replaced_if_postgres_closed_it(
    pool: PgPool,
) {
    let turns = set(&pool, 1, Duration::from_millis(50));
    let mut held = turns.take().await.unwrap();
    let (first, _) = backend(held.connection()).await.unwrap();
    held.done(&SUCCEEDED);
    let (ended,): (bool,) = sqlx::query_as("SELECT pg_terminate_backend($1, 5000)")
        .bind(first)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(ended);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut held = turns.take().await.unwrap();
    let (second, name) = backend(held.connection())
        .await
        .expect("the closed connection was found out before use and replaced");
    assert_ne!(second, first);
    assert_eq!(name, DEDICATED_APPLICATION_NAME);
}
