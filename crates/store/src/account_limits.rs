//! The `account_limits` table: an operator's overrides of one account's
//! limits. A write notifies [`CHANNEL`] with the account id, so every server
//! process drops what it cached for that account
//! (`migrations/0017_account_limits.sql`).

use sqlx::types::Json;
use sqlx::PgPool;
use toolserver_domain::{AccountId, LimitOverrides};

use crate::status_sql::{CALL_PENDING, TURNS_UNFINISHED};
use crate::{accounts, StoreError};

/// The channel notified with an account id when its overrides change.
pub const CHANNEL: &str = "toolserver_account_limits";

/// The overrides of `account` (none stored: no override).
pub async fn get(pool: &PgPool, account: &AccountId) -> Result<LimitOverrides, StoreError> {
    let row: Option<(Json<LimitOverrides>,)> =
        sqlx::query_as("SELECT overrides FROM account_limits WHERE account_id = $1")
            .bind(account.as_str())
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(Json(overrides),)| overrides).unwrap_or_default())
}

/// Stores `overrides` as the whole of `account`'s overrides (recording the
/// account if it is new) and tells every server process.
pub async fn put(
    pool: &PgPool,
    account: &AccountId,
    overrides: &LimitOverrides,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    sqlx::query(
        "INSERT INTO account_limits (account_id, overrides) VALUES ($1, $2) \
         ON CONFLICT (account_id) DO UPDATE SET overrides = EXCLUDED.overrides, updated_at = now()",
    )
    .bind(account.as_str())
    .bind(Json(overrides))
    .execute(&mut *tx)
    .await?;
    notify(&mut tx, account).await?;
    tx.commit().await?;
    Ok(())
}

/// Removes `account`'s overrides (its limits are the defaults again) and
/// tells every server process.
pub async fn clear(pool: &PgPool, account: &AccountId) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM account_limits WHERE account_id = $1")
        .bind(account.as_str())
        .execute(&mut *tx)
        .await?;
    notify(&mut tx, account).await?;
    tx.commit().await?;
    Ok(())
}

async fn notify(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    account: &AccountId,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(account.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Detached turns of `account` started and not yet completed or failed.
pub async fn pending_detached(pool: &PgPool, account: &AccountId) -> Result<u32, StoreError> {
    let sql = format!(
        "SELECT count(*) FROM async_turns WHERE account_id = $1 AND status IN {TURNS_UNFINISHED}"
    );
    count(pool, &sql, account).await
}

/// MCP tasks of `account` not yet settled.
pub async fn open_mcp_tasks(pool: &PgPool, account: &AccountId) -> Result<u32, StoreError> {
    let sql = format!(
        "SELECT count(*) FROM async_tool_results \
         WHERE account_id = $1 AND group_id IS NULL AND status = {CALL_PENDING}"
    );
    count(pool, &sql, account).await
}

async fn count(pool: &PgPool, sql: &str, account: &AccountId) -> Result<u32, StoreError> {
    let (count,): (i64,) = sqlx::query_as(sql)
        .bind(account.as_str())
        .fetch_one(pool)
        .await?;
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}
