//! Detached async tool calls (`async_tool_results`), the dispatch groups
//! that gather the calls of one model pass, and the continuation outbox.
//!
//! Fan-in is decided in Postgres, never in memory: settling a row and
//! sealing a group each lock the group row, and whichever transaction finds
//! the group sealed with nothing remaining marks it continued (a conditional
//! update only one transaction can win) and inserts its outbox row, in the
//! same transaction. So a continuation is enqueued exactly once, whatever the
//! order of the last settlement and the seal, and across crashes.

use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, ToolId};
use uuid::Uuid;

use crate::{accounts, StoreError};

/// `Conflict` constraint name: the group is sealed; no more siblings.
pub const GROUP_SEALED: &str = "dispatch_group_sealed";

/// A call to register in a group.
#[derive(Debug, Clone)]
pub struct NewAsyncResult {
    /// The group of the model pass that made the call.
    pub group_id: Uuid,
    /// The model's call id.
    pub tool_call_id: String,
    /// The uploaded tool, if the call is of one.
    pub tool_id: Option<ToolId>,
    /// Model-facing tool name.
    pub tool_name: String,
    /// SHA-256 of the call's job token.
    pub token_sha256: [u8; 32],
    /// How long the call may stay pending.
    pub ttl: Duration,
}

/// How a call ended, as its completion reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum AsyncOutcome {
    /// The tool's result.
    Completed(Value),
    /// What went wrong.
    Failed(String),
}

impl AsyncOutcome {
    fn status(&self) -> &'static str {
        match self {
            Self::Completed(_) => "completed",
            Self::Failed(_) => "failed",
        }
    }
}

/// What a completion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The row was pending and is now settled; `continued` when this
    /// settlement enqueued the group's continuation.
    Settled {
        /// Whether this settlement enqueued the continuation.
        continued: bool,
    },
    /// The row was already settled with this same outcome; nothing changed.
    Replay,
    /// The row was already settled differently (status given); nothing changed.
    Conflict(String),
    /// The row expired before the completion arrived; nothing changed.
    Expired,
}

/// A stored call.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AsyncResultRecord {
    /// Row id (the status id).
    pub id: Uuid,
    /// Group id.
    pub group_id: Uuid,
    /// The model's call id.
    pub tool_call_id: String,
    /// Model-facing tool name.
    pub tool_name: String,
    /// `pending`, `completed`, `failed`, `cancelled` or `expired`.
    pub status: String,
    /// The result, when completed.
    pub response: Option<Value>,
    /// The error, when failed.
    pub error: Option<String>,
    /// When the call was registered.
    pub created_at: OffsetDateTime,
    /// When it settled.
    pub settled_at: Option<OffsetDateTime>,
    /// When it expires if still pending.
    pub expires_at: OffsetDateTime,
}

/// Opens a group for the detached calls of one model pass of `parent`.
#[tracing::instrument(skip(pool), fields(account.id = %account), err)]
pub async fn create_group(
    pool: &PgPool,
    account: &AccountId,
    parent: &str,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    sqlx::query("INSERT INTO dispatch_groups (id, account_id, parent) VALUES ($1, $2, $3)")
        .bind(id)
        .bind(account.as_str())
        .bind(parent)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(id)
}

/// Registers a call in its (unsealed) group; returns the row id.
#[tracing::instrument(skip(pool, call), fields(account.id = %account), err)]
pub async fn register(
    pool: &PgPool,
    account: &AccountId,
    call: NewAsyncResult,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    let open = sqlx::query(
        "UPDATE dispatch_groups SET remaining = remaining + 1 \
         WHERE id = $1 AND account_id = $2 AND sealed_at IS NULL",
    )
    .bind(call.group_id)
    .bind(account.as_str())
    .execute(&mut *tx)
    .await?;
    if open.rows_affected() == 0 {
        return Err(StoreError::Conflict {
            constraint: GROUP_SEALED.into(),
        });
    }
    sqlx::query(
        "INSERT INTO async_tool_results \
             (id, account_id, group_id, tool_call_id, tool_id, tool_name, token_sha256, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))",
    )
    .bind(id)
    .bind(account.as_str())
    .bind(call.group_id)
    .bind(&call.tool_call_id)
    .bind(call.tool_id.map(|t| t.as_uuid()))
    .bind(&call.tool_name)
    .bind(call.token_sha256.as_slice())
    .bind(call.ttl.as_secs_f64())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// Seals a group: every sibling is registered. Sealing again is a no-op that
/// succeeds. Returns whether this call enqueued the continuation (when every
/// sibling had already settled).
#[tracing::instrument(skip(pool), fields(account.id = %account), err)]
pub async fn seal(pool: &PgPool, account: &AccountId, group_id: Uuid) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let found = sqlx::query(
        "UPDATE dispatch_groups SET sealed_at = COALESCE(sealed_at, now()) \
         WHERE id = $1 AND account_id = $2",
    )
    .bind(group_id)
    .bind(account.as_str())
    .execute(&mut *tx)
    .await?;
    if found.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    let continued = enqueue_if_ready(&mut tx, group_id).await?;
    tx.commit().await?;
    Ok(continued)
}

/// The stored hash of a call's job token (for authenticating completions).
pub async fn token_hash(pool: &PgPool, id: Uuid) -> Result<Vec<u8>, StoreError> {
    let (hash,): (Vec<u8>,) =
        sqlx::query_as("SELECT token_sha256 FROM async_tool_results WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(hash)
}

/// Settles a pending call with `outcome` (the caller has authenticated the
/// completion). See [`Settlement`] for what happens to a settled row.
#[tracing::instrument(skip(pool, outcome), err)]
pub async fn settle(
    pool: &PgPool,
    id: Uuid,
    outcome: &AsyncOutcome,
) -> Result<Settlement, StoreError> {
    let (response, error) = match outcome {
        AsyncOutcome::Completed(value) => (Some(value), None),
        AsyncOutcome::Failed(message) => (None, Some(message.as_str())),
    };
    let mut tx = pool.begin().await?;
    let settled: Option<(Uuid,)> = sqlx::query_as(
        "UPDATE async_tool_results SET status = $2, response = $3, error = $4, settled_at = now() \
         WHERE id = $1 AND status = 'pending' AND expires_at > now() RETURNING group_id",
    )
    .bind(id)
    .bind(outcome.status())
    .bind(response)
    .bind(error)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((group_id,)) = settled else {
        let (status, stored_response, stored_error): (String, Option<Value>, Option<String>) =
            sqlx::query_as("SELECT status, response, error FROM async_tool_results WHERE id = $1")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
        return Ok(match status.as_str() {
            "pending" | "expired" => Settlement::Expired,
            s if s == outcome.status()
                && stored_response.as_ref() == response
                && stored_error.as_deref() == error =>
            {
                Settlement::Replay
            }
            _ => Settlement::Conflict(status),
        });
    };
    sqlx::query("UPDATE dispatch_groups SET remaining = remaining - 1 WHERE id = $1")
        .bind(group_id)
        .execute(&mut *tx)
        .await?;
    let continued = enqueue_if_ready(&mut tx, group_id).await?;
    tx.commit().await?;
    Ok(Settlement::Settled { continued })
}

/// Reads one of `account`'s calls.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: Uuid,
) -> Result<AsyncResultRecord, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, group_id, tool_call_id, tool_name, status, response, error, created_at, \
                settled_at, expires_at \
         FROM async_tool_results WHERE account_id = $1 AND id = $2",
    )
    .bind(account.as_str())
    .bind(id)
    .fetch_one(pool)
    .await?)
}

/// Stops one of `account`'s pending calls: it settles as `cancelled` (its
/// group can still continue, once). Returns false when it was not pending.
pub async fn cancel(pool: &PgPool, account: &AccountId, id: Uuid) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let cancelled: Option<(Uuid,)> = sqlx::query_as(
        "UPDATE async_tool_results SET status = 'cancelled', settled_at = now(), \
             error = 'stopped before it finished' \
         WHERE id = $1 AND account_id = $2 AND status = 'pending' RETURNING group_id",
    )
    .bind(id)
    .bind(account.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some((group_id,)) = cancelled else {
        return Ok(false);
    };
    sqlx::query("UPDATE dispatch_groups SET remaining = remaining - 1 WHERE id = $1")
        .bind(group_id)
        .execute(&mut *tx)
        .await?;
    enqueue_if_ready(&mut tx, group_id).await?;
    tx.commit().await?;
    Ok(true)
}

/// The uploaded tool of a call, if any.
pub async fn tool_of(
    pool: &PgPool,
    account: &AccountId,
    id: Uuid,
) -> Result<Option<ToolId>, StoreError> {
    let (tool,): (Option<Uuid>,) =
        sqlx::query_as("SELECT tool_id FROM async_tool_results WHERE id = $1 AND account_id = $2")
            .bind(id)
            .bind(account.as_str())
            .fetch_one(pool)
            .await?;
    Ok(tool.map(ToolId::from_uuid))
}

/// Every call of a group, in registration order.
pub async fn of_group(pool: &PgPool, group_id: Uuid) -> Result<Vec<AsyncResultRecord>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, group_id, tool_call_id, tool_name, status, response, error, created_at, \
                settled_at, expires_at \
         FROM async_tool_results WHERE group_id = $1 ORDER BY id",
    )
    .bind(group_id)
    .fetch_all(pool)
    .await?)
}

/// Gives a claimed continuation back without having run it (its
/// conversation was busy), to be claimed again at once; the claim does not
/// count as an attempt.
pub async fn release_continuation(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE continuation_outbox SET claimed_at = NULL, attempts = attempts - 1 \
         WHERE id = $1 AND done_at IS NULL",
    )
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// The group's continuation, if enqueued: its outbox row id.
pub async fn continuation_of(pool: &PgPool, group_id: Uuid) -> Result<Option<Uuid>, StoreError> {
    let row: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM continuation_outbox WHERE group_id = $1")
            .bind(group_id)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(id,)| id))
}

/// Expires up to `limit` pending calls past their expiry (the model will see
/// a failure), settling them the way a completion would, so their groups can
/// still continue (once). Returns how many expired. Safe to run from several
/// servers at once: rows are claimed with `SKIP LOCKED`.
#[tracing::instrument(skip(pool), err)]
pub async fn expire_due(pool: &PgPool, limit: i64) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let expired: Vec<(Uuid,)> = sqlx::query_as(
        "UPDATE async_tool_results SET status = 'expired', settled_at = now(), \
             error = 'the call did not complete before it expired' \
         WHERE id IN (SELECT id FROM async_tool_results \
                      WHERE status = 'pending' AND expires_at <= now() \
                      ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) \
         RETURNING group_id",
    )
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    let mut groups: Vec<Uuid> = expired.iter().map(|(g,)| *g).collect();
    groups.sort();
    for group_id in &groups {
        sqlx::query("UPDATE dispatch_groups SET remaining = remaining - 1 WHERE id = $1")
            .bind(group_id)
            .execute(&mut *tx)
            .await?;
    }
    groups.dedup();
    for group_id in groups {
        enqueue_if_ready(&mut tx, group_id).await?;
    }
    tx.commit().await?;
    Ok(expired.len() as u64)
}

/// A continuation taken by one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedContinuation {
    /// Outbox row id: the continuation's own event id, for dedupe.
    pub id: Uuid,
    /// The group whose siblings have all settled.
    pub group_id: Uuid,
    /// The owning account.
    pub account_id: String,
    /// The group's parent (what to resume).
    pub parent: String,
    /// How many times it has been claimed, this one included.
    pub attempts: i32,
}

/// Claims one continuation that is not done and not claimed within
/// `visibility` (a claim older than that is presumed lost with its worker,
/// so delivery is at least once). Workers never block each other.
#[tracing::instrument(skip(pool), err)]
pub async fn claim_continuation(
    pool: &PgPool,
    visibility: Duration,
) -> Result<Option<ClaimedContinuation>, StoreError> {
    let claimed: Option<(Uuid, Uuid, String, String, i32)> = sqlx::query_as(
        "UPDATE continuation_outbox o SET claimed_at = now(), attempts = o.attempts + 1 \
         FROM dispatch_groups g \
         WHERE o.id = (SELECT id FROM continuation_outbox \
                       WHERE done_at IS NULL \
                         AND (claimed_at IS NULL OR claimed_at < now() - make_interval(secs => $1)) \
                       ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) \
           AND g.id = o.group_id \
         RETURNING o.id, o.group_id, o.account_id, g.parent, o.attempts",
    )
    .bind(visibility.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    Ok(claimed.map(
        |(id, group_id, account_id, parent, attempts)| ClaimedContinuation {
            id,
            group_id,
            account_id,
            parent,
            attempts,
        },
    ))
}

/// Marks a claimed continuation done. Returns false when it was already
/// done (a duplicate delivery finished first).
#[tracing::instrument(skip(pool), err)]
pub async fn finish_continuation(pool: &PgPool, id: Uuid) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE continuation_outbox SET done_at = now() WHERE id = $1 AND done_at IS NULL",
    )
    .bind(id)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Marks the group continued and enqueues its continuation if it is sealed
/// with no sibling remaining and not continued yet. The caller's transaction
/// holds the group row lock (it has just updated the row).
async fn enqueue_if_ready(tx: &mut PgConnection, group_id: Uuid) -> Result<bool, StoreError> {
    let ready: Option<(String,)> = sqlx::query_as(
        "UPDATE dispatch_groups SET continued_at = now() \
         WHERE id = $1 AND sealed_at IS NOT NULL AND remaining = 0 AND continued_at IS NULL \
         RETURNING account_id",
    )
    .bind(group_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((account_id,)) = ready else {
        return Ok(false);
    };
    sqlx::query("INSERT INTO continuation_outbox (id, group_id, account_id) VALUES ($1, $2, $3)")
        .bind(Uuid::now_v7())
        .bind(group_id)
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
    Ok(true)
}
