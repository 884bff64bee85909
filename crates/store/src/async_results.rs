//! Detached async tool calls (`async_tool_results`) and the dispatch groups
//! that gather the calls of one model pass. States and moves:
//! [`toolserver_domain::lifecycle`].
//!
//! Fan-in is decided in Postgres, never in memory. A pass's calls are
//! recorded together with their group, which is born sealed (see
//! [`register_pass`]); settling a row locks the group row, and whichever
//! transaction finds the group sealed with nothing remaining marks it
//! continued (a conditional update only one transaction can win) and inserts
//! its `continue` job, in the same transaction. So a continuation is
//! enqueued exactly once, under concurrent and duplicate settlements and
//! across crashes. Groups left unsealed by earlier versions are sealed by
//! the reaper ([`seal_orphaned_groups`]).
//!
//! A call leaves `pending` once: by its completion, by `async_status` stop,
//! by its deadline (`expires_at`, which each tool heartbeat moves up to the
//! hard cap `hard_expires_at`), or when its runner is lost ([`LostRunners`]):
//! it stops pinging before `alive_until` (its server stopped answering, or
//! the runner went with it), or the server running it saw it exit. A lost
//! call is launched again when safe to repeat, else it fails with a reason
//! that says which.
//! A call launched by a release whose runners never pinged has no
//! `alive_until`; its runner counts as silent from the upgrade
//! (`legacy_runner_since`, see `migrations/0015_in_flight_at_upgrade.sql`).

use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, CallStatus, ResultId, ToolId};
use uuid::Uuid;

use crate::status_sql::{CALL_CANCELLED, CALL_PENDING};
use crate::text::storable;
use crate::{accounts, StoreError};
use fan_in::{enqueue_if_ready, release_from_group};
pub use reaping::{
    expire_due, fail_lost_runners, relaunch_lost_runners, settle_silent_runners, LostRunners,
    SilentRunners, LEGACY_RUNNER_ERROR, SILENT_RUNNER_ERROR,
};

mod fan_in;
mod reaping;

/// A call to register with its pass.
#[derive(Debug, Clone)]
pub struct NewAsyncResult {
    /// The model's call id.
    pub tool_call_id: String,
    /// The uploaded tool, if the call is of one.
    pub tool_id: Option<ToolId>,
    /// Model-facing tool name.
    pub tool_name: String,
    /// SHA-256 of the call's job token.
    pub token_sha256: [u8; 32],
    /// How long the call may stay pending at most (the hard cap).
    pub ttl: Duration,
    /// When set, the call expires this long after its last tool heartbeat
    /// (or its launch), before the hard cap.
    pub heartbeat_timeout: Option<Duration>,
    /// How long the runner may go without pinging before the call fails.
    pub liveness_timeout: Duration,
    /// The call's input.
    pub input: Value,
    /// Whether the call may be launched again when its runner dies: its
    /// tool's effects (as the agent config narrows them) are `read` or
    /// `idempotent`.
    pub safe_to_repeat: bool,
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
    /// The status this outcome settles a call in.
    pub fn status(&self) -> CallStatus {
        match self {
            Self::Completed(_) => CallStatus::Completed,
            Self::Failed(_) => CallStatus::Failed,
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
    Conflict(CallStatus),
    /// The row expired before the completion arrived; nothing changed.
    Expired,
}

/// A stored call.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AsyncResultRecord {
    /// Row id (the status id).
    pub id: ResultId,
    /// Group id (`None` for an MCP task, which has no turn).
    pub group_id: Option<Uuid>,
    /// The model's call id.
    pub tool_call_id: String,
    /// Model-facing tool name.
    pub tool_name: String,
    /// Where the call stands.
    pub status: CallStatus,
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
    /// The tool's last heartbeat, if any.
    pub last_heartbeat_at: Option<OffsetDateTime>,
    /// The progress its last heartbeat reported, if any.
    pub progress: Option<Value>,
    /// The call's input (absent on calls registered before it was kept).
    pub input: Option<Value>,
}

const RECORD_COLUMNS: &str = "id, group_id, tool_call_id, tool_name, status, response, error, \
     created_at, settled_at, expires_at, last_heartbeat_at, progress, input";

/// What a heartbeat reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Beat {
    /// The tool's own heartbeat, with optional progress (JSON text).
    Tool(Option<String>),
    /// The runner's automatic ping: it is alive and still running the call.
    Liveness,
}

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq)]
pub enum HeartbeatAnswer {
    /// The call is pending; it now expires at this time.
    Pending(OffsetDateTime),
    /// The call has settled already (the tool may stop).
    Settled(CallStatus),
    /// The call expired.
    Expired,
}

/// Where a pass's calls are recorded: its turn and the job running it.
#[derive(Debug, Clone, Copy)]
pub struct PassOwner {
    /// The detached turn.
    pub turn_id: Uuid,
    /// The job whose run made the pass.
    pub job_id: Uuid,
}

/// Records every detached call of one model pass, before any is launched,
/// in one transaction: a dispatch group born sealed (no call can join it
/// later) and one row per call. So after a crash either the whole pass is
/// recorded or none of it is. Returns the row ids, in the order given.
#[tracing::instrument(skip(pool, calls), fields(account.id = %account, calls = calls.len()))]
pub async fn register_pass(
    pool: &PgPool,
    account: &AccountId,
    owner: PassOwner,
    calls: &[NewAsyncResult],
) -> Result<Vec<ResultId>, StoreError> {
    let group_id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    sqlx::query(
        "INSERT INTO dispatch_groups \
             (id, account_id, parent, turn_id, job_id, remaining, sealed_at) \
         VALUES ($1, $2, $3, $4, $5, $6, now())",
    )
    .bind(group_id)
    .bind(account.as_str())
    .bind(owner.turn_id.to_string())
    .bind(owner.turn_id)
    .bind(owner.job_id)
    .bind(i32::try_from(calls.len()).unwrap_or(i32::MAX))
    .execute(&mut *tx)
    .await?;
    let mut ids = Vec::with_capacity(calls.len());
    for call in calls {
        let id = ResultId::generate();
        let ttl = call.ttl.as_secs_f64();
        let heartbeat = call.heartbeat_timeout.map(|t| t.as_secs_f64());
        sqlx::query(
            "INSERT INTO async_tool_results \
                 (id, account_id, group_id, tool_call_id, tool_id, tool_name, token_sha256, \
                  hard_expires_at, expires_at, heartbeat_timeout_secs, alive_until, input, \
                  safe_to_repeat) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8), \
                     now() + make_interval(secs => LEAST($8, COALESCE($9, $8))), $9, \
                     now() + make_interval(secs => $10), $11::json, $12)",
        )
        .bind(id)
        .bind(account.as_str())
        .bind(group_id)
        .bind(&call.tool_call_id)
        .bind(call.tool_id.map(|t| t.as_uuid()))
        .bind(&call.tool_name)
        .bind(call.token_sha256.as_slice())
        .bind(ttl)
        .bind(heartbeat)
        .bind(call.liveness_timeout.as_secs_f64())
        .bind(call.input.to_string())
        .bind(call.safe_to_repeat)
        .execute(&mut *tx)
        .await?;
        ids.push(id);
    }
    tx.commit().await?;
    Ok(ids)
}

/// Whether the job `job_id` opened any group (an earlier attempt of it
/// launched detached calls).
pub async fn job_opened_groups(tx: &mut PgConnection, job_id: Uuid) -> Result<bool, StoreError> {
    let (any,): (bool,) =
        sqlx::query_as("SELECT EXISTS (SELECT 1 FROM dispatch_groups WHERE job_id = $1)")
            .bind(job_id)
            .fetch_one(&mut *tx)
            .await?;
    Ok(any)
}

/// Seals up to `limit` groups left open for longer than `grace` whose job
/// no longer exists (a seal that failed, or a run that ended without one),
/// so they continue once their calls settle. Returns how many.
#[tracing::instrument(skip(pool))]
pub async fn seal_orphaned_groups(
    pool: &PgPool,
    grace: Duration,
    limit: i64,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let sealed: Vec<(Uuid,)> = sqlx::query_as(
        "UPDATE dispatch_groups SET sealed_at = now() WHERE id IN ( \
             SELECT g.id FROM dispatch_groups g \
             WHERE g.sealed_at IS NULL AND g.created_at < now() - make_interval(secs => $1) \
               AND NOT EXISTS (SELECT 1 FROM continuation_outbox o WHERE o.id = g.job_id) \
             LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING id",
    )
    .bind(grace.as_secs_f64())
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    for (group_id,) in &sealed {
        enqueue_if_ready(&mut tx, *group_id).await?;
    }
    tx.commit().await?;
    Ok(sealed.len() as u64)
}

/// Marks every group of `turn_id` that has not continued as done without a
/// continuation (the turn ended for good), in the caller's transaction.
pub async fn abandon_open_groups(tx: &mut PgConnection, turn_id: Uuid) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE dispatch_groups SET continued_at = now(), sealed_at = COALESCE(sealed_at, now()) \
         WHERE turn_id = $1 AND continued_at IS NULL",
    )
    .bind(turn_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The stored hash of a call's job token (for authenticating completions).
pub async fn token_hash(pool: &PgPool, id: ResultId) -> Result<Vec<u8>, StoreError> {
    let (hash,): (Vec<u8>,) =
        sqlx::query_as("SELECT token_sha256 FROM async_tool_results WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(hash)
}

/// Settles a pending call with `outcome` (the caller has authenticated the
/// completion). See [`Settlement`] for what happens to a settled row. Any
/// JSON is kept as sent (`\u0000` included); a NUL in an error message is
/// stored as the escape `\u0000`.
#[tracing::instrument(skip(pool, outcome))]
pub async fn settle(
    pool: &PgPool,
    id: ResultId,
    outcome: &AsyncOutcome,
) -> Result<Settlement, StoreError> {
    let (response, error) = match outcome {
        AsyncOutcome::Completed(value) => (Some(value.to_string()), None),
        AsyncOutcome::Failed(message) => (None, Some(storable(message).into_owned())),
    };
    let mut tx = pool.begin().await?;
    let settled: Option<(Option<Uuid>,)> = sqlx::query_as(&format!(
        "UPDATE async_tool_results SET status = $2, response = $3::json, error = $4, \
             settled_at = now() \
         WHERE id = $1 AND status = {CALL_PENDING} AND expires_at > now() RETURNING group_id"
    ))
    .bind(id)
    .bind(outcome.status())
    .bind(&response)
    .bind(&error)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((group_id,)) = settled else {
        let (status, stored_response, stored_error): (CallStatus, Option<Value>, Option<String>) =
            sqlx::query_as("SELECT status, response, error FROM async_tool_results WHERE id = $1")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
        let same = match outcome {
            AsyncOutcome::Completed(value) => stored_response.as_ref() == Some(value),
            AsyncOutcome::Failed(_) => stored_error == error,
        };
        return Ok(match status {
            CallStatus::Pending | CallStatus::Expired => Settlement::Expired,
            s if s == outcome.status() && same => Settlement::Replay,
            s => Settlement::Conflict(s),
        });
    };
    let continued = match group_id {
        Some(group_id) => {
            release_from_group(&mut tx, group_id).await?;
            enqueue_if_ready(&mut tx, group_id).await?
        }
        None => false,
    };
    tx.commit().await?;
    Ok(Settlement::Settled { continued })
}

/// Records a heartbeat of a pending call: the runner is alive until
/// `liveness` from now, and a tool heartbeat also moves the call's deadline
/// to its heartbeat timeout from now (never past the hard cap) and keeps
/// its progress.
#[tracing::instrument(skip(pool, beat))]
pub async fn heartbeat(
    pool: &PgPool,
    id: ResultId,
    beat: &Beat,
    liveness: Duration,
) -> Result<HeartbeatAnswer, StoreError> {
    let (from_tool, progress) = match beat {
        Beat::Tool(progress) => (true, progress.as_deref()),
        Beat::Liveness => (false, None),
    };
    let beat: Option<(OffsetDateTime,)> = sqlx::query_as(&format!(
        "UPDATE async_tool_results SET \
             alive_until = now() + make_interval(secs => $2), \
             last_heartbeat_at = CASE WHEN $3 THEN now() ELSE last_heartbeat_at END, \
             progress = CASE WHEN $3 AND $4::text IS NOT NULL THEN $4::json ELSE progress END, \
             expires_at = CASE WHEN $3 AND heartbeat_timeout_secs IS NOT NULL \
                 THEN LEAST(hard_expires_at, now() + make_interval(secs => heartbeat_timeout_secs)) \
                 ELSE expires_at END \
         WHERE id = $1 AND status = {CALL_PENDING} AND expires_at > now() RETURNING expires_at"
    ))
    .bind(id)
    .bind(liveness.as_secs_f64())
    .bind(from_tool)
    .bind(progress)
    .fetch_optional(pool)
    .await?;
    if let Some((expires_at,)) = beat {
        return Ok(HeartbeatAnswer::Pending(expires_at));
    }
    let (status,): (CallStatus,) =
        sqlx::query_as("SELECT status FROM async_tool_results WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(match status {
        CallStatus::Pending | CallStatus::Expired => HeartbeatAnswer::Expired,
        settled => HeartbeatAnswer::Settled(settled),
    })
}

/// Reads one of `account`'s calls.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: ResultId,
) -> Result<AsyncResultRecord, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {RECORD_COLUMNS} FROM async_tool_results WHERE account_id = $1 AND id = $2"
    ))
    .bind(account.as_str())
    .bind(id)
    .fetch_one(pool)
    .await?)
}

/// Stops one of `account`'s pending calls: it settles as `cancelled` (its
/// group can still continue, once). Returns false when it was not pending.
pub async fn cancel(pool: &PgPool, account: &AccountId, id: ResultId) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let cancelled: Option<(Option<Uuid>,)> = sqlx::query_as(&format!(
        "UPDATE async_tool_results SET status = {CALL_CANCELLED}, settled_at = now(), \
             error = 'stopped before it finished' \
         WHERE id = $1 AND account_id = $2 AND status = {CALL_PENDING} RETURNING group_id"
    ))
    .bind(id)
    .bind(account.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some((group_id,)) = cancelled else {
        return Ok(false);
    };
    if let Some(group_id) = group_id {
        release_from_group(&mut tx, group_id).await?;
        enqueue_if_ready(&mut tx, group_id).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// The uploaded tool of a call, if any.
pub async fn tool_of(
    pool: &PgPool,
    account: &AccountId,
    id: ResultId,
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
    Ok(sqlx::query_as(&format!(
        "SELECT {RECORD_COLUMNS} FROM async_tool_results WHERE group_id = $1 ORDER BY id"
    ))
    .bind(group_id)
    .fetch_all(pool)
    .await?)
}

/// The calls of every group that the job `job_id` opened, in the order
/// they were made.
pub async fn of_job(pool: &PgPool, job_id: Uuid) -> Result<Vec<AsyncResultRecord>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {RECORD_COLUMNS} FROM async_tool_results \
         WHERE group_id IN (SELECT id FROM dispatch_groups WHERE job_id = $1) ORDER BY id"
    ))
    .bind(job_id)
    .fetch_all(pool)
    .await?)
}

/// Gives a pending call a new job token (the hash of it) before it is
/// launched again; the launch it will be, or `None` when the call is no
/// longer pending.
pub async fn rotate_token(
    pool: &PgPool,
    id: ResultId,
    token_sha256: [u8; 32],
) -> Result<Option<i32>, StoreError> {
    let rotated: Option<(i32,)> = sqlx::query_as(&format!(
        "UPDATE async_tool_results SET token_sha256 = $2 \
         WHERE id = $1 AND status = {CALL_PENDING} RETURNING launches"
    ))
    .bind(id)
    .bind(token_sha256.as_slice())
    .fetch_optional(pool)
    .await?;
    Ok(rotated.map(|(launch,)| launch))
}
