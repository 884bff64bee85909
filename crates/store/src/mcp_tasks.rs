//! MCP tasks: a task-augmented `tools/call` of an uploaded tool is a
//! detached call (`async_tool_results`) with no dispatch group, so it lives
//! through server restarts, any server process can answer for it, and the
//! runner completes it through the same completion route as a turn's
//! detached call. Settling it continues nothing. A task is recorded before
//! its call is launched; one whose call ends within the launch is
//! discarded, since its client got the result and never the task.

use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, CallStatus, ResultId, ToolId};
use uuid::Uuid;

use crate::status_sql::{CALL_EXPIRED, CALL_PENDING};
use crate::StoreError;

/// A task to record before its call is launched.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The uploaded tool it calls.
    pub tool_id: ToolId,
    /// The tool's name.
    pub tool_name: String,
    /// The call's input.
    pub input: Value,
    /// SHA-256 of the call's job token.
    pub token_sha256: [u8; 32],
    /// How long the task may stay working, and is kept (its TTL).
    pub ttl: Duration,
    /// How long the runner may go without pinging before the task fails.
    pub liveness_timeout: Duration,
    /// The poll interval the task suggests.
    pub poll_interval: Duration,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct TaskRecord {
    /// The task id.
    pub id: ResultId,
    /// The tool's name.
    pub tool_name: String,
    /// The uploaded tool.
    pub tool_id: Option<Uuid>,
    /// Where the call stands.
    pub status: CallStatus,
    /// The tool's output, when completed.
    pub response: Option<Value>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// The progress the tool last reported.
    pub progress: Option<Value>,
    /// When the task was created.
    pub created_at: OffsetDateTime,
    /// When it last changed.
    pub updated_at: OffsetDateTime,
    /// When it is discarded (its TTL from creation).
    pub hard_expires_at: OffsetDateTime,
    /// The longest poll interval it suggests, in milliseconds.
    pub task_poll_ms: i32,
    /// How long it has existed, in milliseconds, as the database saw it when read.
    pub age_ms: i64,
}

/// A task the reaper expired: its call may still run on its runner.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ExpiredTask {
    /// The task id.
    pub id: ResultId,
    /// Its account.
    pub account_id: String,
    /// The uploaded tool it calls.
    pub tool_id: Option<Uuid>,
}

/// Records a task of `account`; returns its id. One statement: the account
/// owns the uploaded tool the task calls, so it is recorded already (a call
/// answered inline pays for every round trip here).
pub async fn insert(
    pool: &PgPool,
    account: &AccountId,
    task: &NewTask,
) -> Result<ResultId, StoreError> {
    let id = ResultId::generate();
    sqlx::query(
        "INSERT INTO async_tool_results \
             (id, account_id, group_id, tool_call_id, tool_id, tool_name, token_sha256, \
              hard_expires_at, expires_at, alive_until, input, safe_to_repeat, task_poll_ms) \
         VALUES ($1, $2, NULL, $1::text, $3, $4, $5, now() + make_interval(secs => $6), \
                 now() + make_interval(secs => $6), now() + make_interval(secs => $7), \
                 $8::json, false, $9)",
    )
    .bind(id)
    .bind(account.as_str())
    .bind(task.tool_id.as_uuid())
    .bind(&task.tool_name)
    .bind(task.token_sha256.as_slice())
    .bind(task.ttl.as_secs_f64())
    .bind(task.liveness_timeout.as_secs_f64())
    .bind(task.input.to_string())
    .bind(
        i32::try_from(task.poll_interval.as_millis())
            .unwrap_or(i32::MAX)
            .max(1),
    )
    .execute(pool)
    .await?;
    Ok(id)
}

/// Reads one of `account`'s tasks; a turn's detached call, another
/// account's task and a discarded one are [`StoreError::NotFound`].
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: ResultId,
) -> Result<TaskRecord, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT id, tool_name, tool_id, status, response, error, progress, created_at, \
             GREATEST(created_at, COALESCE(settled_at, created_at), \
                      COALESCE(last_heartbeat_at, created_at)) AS updated_at, \
             hard_expires_at, task_poll_ms, \
             (EXTRACT(EPOCH FROM now() - created_at) * 1000)::bigint AS age_ms \
         FROM async_tool_results \
         WHERE account_id = $1 AND id = $2 AND group_id IS NULL \
           AND (status = {CALL_PENDING} OR hard_expires_at > now())"
    ))
    .bind(account.as_str())
    .bind(id)
    .fetch_one(pool)
    .await?)
}

/// Forgets one of `account`'s tasks whose call answered in its launch: no
/// client knows its id, and its result went out with the call.
pub async fn discard(pool: &PgPool, account: &AccountId, id: ResultId) -> Result<(), StoreError> {
    sqlx::query(
        "DELETE FROM async_tool_results WHERE account_id = $1 AND id = $2 AND group_id IS NULL",
    )
    .bind(account.as_str())
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Expires up to `limit` tasks still working at their deadline (their TTL)
/// and returns them, so their calls can be stopped on their runners: no
/// client can reach a task after its TTL. Safe to run from several servers
/// at once: rows are claimed with `SKIP LOCKED`.
pub async fn expire_due(pool: &PgPool, limit: i64) -> Result<Vec<ExpiredTask>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "UPDATE async_tool_results SET status = {CALL_EXPIRED}, settled_at = now(), \
             error = 'the task did not complete within its TTL' \
         WHERE id IN (SELECT id FROM async_tool_results \
                      WHERE group_id IS NULL AND status = {CALL_PENDING} \
                        AND expires_at <= now() \
                      ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) \
         RETURNING id, account_id, tool_id"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Deletes up to `limit` tasks past their TTL that have settled (a task
/// still pending at its TTL expires first). Returns how many.
pub async fn purge_expired(pool: &PgPool, limit: i64) -> Result<u64, StoreError> {
    let purged = sqlx::query(&format!(
        "DELETE FROM async_tool_results WHERE id IN ( \
             SELECT id FROM async_tool_results \
             WHERE group_id IS NULL AND status <> {CALL_PENDING} AND hard_expires_at <= now() \
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)"
    ))
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(purged.rows_affected())
}
