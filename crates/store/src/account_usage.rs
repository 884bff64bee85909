//! The `account_usage` table: what an account's runners used per period (a
//! UTC calendar month), added to by every server process
//! (`migrations/0017_account_limits.sql`).

use sqlx::PgPool;
use time::Date;
use toolserver_domain::AccountId;

use crate::StoreError;

/// What runners used in one period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunnerUse {
    /// CPU time, in milliseconds.
    pub cpu_ms: u64,
    /// Bytes the egress proxy carried, both ways.
    pub egress_bytes: u64,
}

/// Adds `used` to `account`'s row for the period starting `period_start`.
pub async fn add(
    pool: &PgPool,
    account: &AccountId,
    period_start: Date,
    used: RunnerUse,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO account_usage (account_id, period_start, runner_cpu_ms, egress_bytes) \
         SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM accounts WHERE id = $1) \
         ON CONFLICT (account_id, period_start) DO UPDATE SET \
           runner_cpu_ms = account_usage.runner_cpu_ms + EXCLUDED.runner_cpu_ms, \
           egress_bytes = account_usage.egress_bytes + EXCLUDED.egress_bytes",
    )
    .bind(account.as_str())
    .bind(period_start)
    .bind(i64::try_from(used.cpu_ms).unwrap_or(i64::MAX))
    .bind(i64::try_from(used.egress_bytes).unwrap_or(i64::MAX))
    .execute(pool)
    .await?;
    Ok(())
}

/// What `account`'s runners used in the period starting `period_start`, as
/// stored so far.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    period_start: Date,
) -> Result<RunnerUse, StoreError> {
    let row: Option<(i64, i64)> = sqlx::query_as(
        "SELECT runner_cpu_ms, egress_bytes FROM account_usage \
         WHERE account_id = $1 AND period_start = $2",
    )
    .bind(account.as_str())
    .bind(period_start)
    .fetch_optional(pool)
    .await?;
    Ok(
        row.map_or_else(RunnerUse::default, |(cpu_ms, egress_bytes)| RunnerUse {
            cpu_ms: u64::try_from(cpu_ms).unwrap_or(0),
            egress_bytes: u64::try_from(egress_bytes).unwrap_or(0),
        }),
    )
}
