//! The `server_processes` table: one row per running server process, kept
//! alive by the process itself, so that what a process holds (conversation
//! leases, job claims) is known for abandoned within seconds of its death
//! (`migrations/0016_server_processes.sql`).

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::StoreError;

/// Records `process` as alive for `alive` from now (creating its row).
pub async fn keep_alive(
    conn: &mut PgConnection,
    process: Uuid,
    alive: Duration,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO server_processes (id, alive_until) \
         VALUES ($1, now() + make_interval(secs => $2)) \
         ON CONFLICT (id) DO UPDATE SET alive_until = EXCLUDED.alive_until",
    )
    .bind(process)
    .bind(alive.as_secs_f64())
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks `process` dead now: what it still holds is taken over at once.
pub async fn mark_dead(pool: &PgPool, process: Uuid) -> Result<(), StoreError> {
    sqlx::query("UPDATE server_processes SET alive_until = now() WHERE id = $1")
        .bind(process)
        .execute(pool)
        .await?;
    Ok(())
}

/// Removes the rows of processes dead longer than `after` that hold no
/// conversation any more (a free conversation may still name the process
/// that last held it); returns how many.
pub async fn purge_dead(pool: &PgPool, after: Duration) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "DELETE FROM server_processes p \
         WHERE p.alive_until < now() - make_interval(secs => $1) \
           AND NOT EXISTS (SELECT 1 FROM conversations c \
                           WHERE c.lease_process = p.id AND c.active_turn IS NOT NULL)",
    )
    .bind(after.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
