//! Figures about the durable lifecycle, read when metrics are scraped.

use sqlx::PgPool;

use crate::StoreError;

/// Detached calls (`async_tool_results`) by status.
pub async fn async_results_by_status(pool: &PgPool) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = sqlx::query_as(
        "SELECT status, count(*) FROM async_tool_results GROUP BY status ORDER BY status",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Continuations waiting to run or running (a job leaves the outbox when
/// it is done).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContinuationBacklog {
    /// Continuations not done.
    pub pending: i64,
    /// Seconds the oldest of them has waited (0 when there are none).
    pub oldest_age_secs: f64,
}

/// The continuation outbox's backlog.
pub async fn continuation_backlog(pool: &PgPool) -> Result<ContinuationBacklog, StoreError> {
    let (pending, oldest_age_secs): (i64, f64) = sqlx::query_as(
        "SELECT count(*), \
                COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 \
         FROM continuation_outbox",
    )
    .fetch_one(pool)
    .await?;
    Ok(ContinuationBacklog {
        pending,
        oldest_age_secs,
    })
}
