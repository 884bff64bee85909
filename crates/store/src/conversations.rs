//! The `conversations` table: the UI messages of each conversation, and a
//! lease so only one turn at a time writes to a conversation.

use std::sync::LazyLock;
use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId};
use uuid::Uuid;

use crate::commit::UNFLUSHED;
use crate::{accounts, StoreError};

/// `Conflict` constraint name: the conversation belongs to another agent.
pub const OTHER_AGENT: &str = "conversation_agent";
/// `Conflict` constraint name: another turn holds the conversation.
pub const BUSY: &str = "conversation_busy";

/// A stored conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationRecord {
    /// The client-chosen id.
    pub id: String,
    /// The agent the conversation talks to.
    pub agent_id: AgentId,
    /// UI messages in order.
    pub messages: Vec<Value>,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// Last change.
    pub updated_at: OffsetDateTime,
    /// The handoff to people it is under, if any (see [`crate::handoffs`]).
    pub handoff: Option<Value>,
}

#[derive(FromRow)]
struct ConversationRow {
    id: String,
    agent_id: Uuid,
    messages: Value,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    handoff: Option<Value>,
}

impl From<ConversationRow> for ConversationRecord {
    fn from(row: ConversationRow) -> Self {
        let messages = match row.messages {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        Self {
            id: row.id,
            agent_id: AgentId::from_uuid(row.agent_id),
            messages,
            created_at: row.created_at,
            updated_at: row.updated_at,
            handoff: row.handoff,
        }
    }
}

/// Who takes a conversation's lease, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// The turn (or job) that holds it; every later write names it.
    pub holder: Uuid,
    /// The server process running the holder (see [`crate::processes`]).
    pub process: Uuid,
    /// How long the lease lasts unless renewed.
    pub lease: Duration,
}

/// How [`begin_turn`] went.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// The lease is the caller's.
    Held {
        /// The stored messages.
        messages: Vec<Value>,
        /// When the holder took the lease (kept when it takes its own
        /// lease again).
        taken_at: OffsetDateTime,
        /// The handoff to people holding the conversation, if any (see
        /// [`crate::handoffs`]).
        handoff: Option<Value>,
    },
    /// The conversation is held by a turn whose process died (or whose
    /// lease lapsed) and that no job will run again: its turn is to be
    /// stored as interrupted ([`recover`]) before the conversation is taken.
    Abandoned(AbandonedTurn),
}

/// A lease whose holder will not come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbandonedTurn {
    /// The holder.
    pub holder: Uuid,
    /// When it took the lease (its turn streams opened at or after it);
    /// `None` for a lease taken before this was recorded.
    pub taken_at: Option<OffsetDateTime>,
}

/// SQL: whether the holder of the lease of conversation `c` (joined with
/// its process `p`) is gone: its lease lapsed, or its process stopped
/// renewing its row.
pub(crate) const HOLDER_GONE: &str = "(c.lease_expires_at <= now() OR p.alive_until <= now())";

/// SQL: whether the holder of conversation `c`'s lease is a job, which is
/// claimed again when its process dies and carries its turn on itself.
pub(crate) const HOLDER_IS_JOB: &str =
    "EXISTS (SELECT 1 FROM continuation_outbox j WHERE j.id = c.active_turn)";

/// SQL of [`begin_turn`]'s insert, which also makes its transaction commit
/// without waiting for the disk; built once.
static CREATE_UNFLUSHED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {UNFLUSHED} \
         INSERT INTO conversations (account_id, id, agent_id) SELECT $1, $2, $3 FROM unflushed \
         ON CONFLICT (account_id, id) DO NOTHING"
    )
});

/// SQL of [`save`], committed without waiting for the disk; built once.
static SAVE_UNFLUSHED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {UNFLUSHED} \
         UPDATE conversations SET messages = $4::json, updated_at = now() FROM unflushed \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3"
    )
});

/// SQL of [`begin_turn`]'s look at the conversation's lease, locking its
/// row; built once.
static LOCK_HOLDER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT c.agent_id, c.active_turn, c.lease_taken_at, \
                (c.active_turn IS NOT NULL AND c.active_turn <> $3) AS other, \
                coalesce({HOLDER_GONE}, false) AS gone, {HOLDER_IS_JOB} AS job \
         FROM conversations c LEFT JOIN server_processes p ON p.id = c.lease_process \
         WHERE c.account_id = $1 AND c.id = $2 FOR UPDATE OF c"
    )
});

/// Creates the conversation if new and takes its lease on `terms` (a lease
/// of another live holder is `Conflict { BUSY }`, and so is one of a job
/// whose process died, until the job runs again; a holder may take its own
/// lease again, as a retried job does; a conversation of another agent is
/// `Conflict { OTHER_AGENT }`). A lease whose holder is gone otherwise is
/// [`Begun::Abandoned`]: nothing is taken. Commits without waiting for the
/// disk (see [`crate::commit`]).
#[tracing::instrument(skip(pool), fields(account.id = %account, agent.id = %agent))]
pub async fn begin_turn(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    agent: AgentId,
    terms: LeaseTerms,
) -> Result<Begun, StoreError> {
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    sqlx::query(&CREATE_UNFLUSHED)
        .bind(account.as_str())
        .bind(id)
        .bind(agent.as_uuid())
        .execute(&mut *tx)
        .await?;
    let held: HeldBy = sqlx::query_as(&LOCK_HOLDER)
        .bind(account.as_str())
        .bind(id)
        .bind(terms.holder)
        .fetch_one(&mut *tx)
        .await?;
    if held.agent_id != agent.as_uuid() {
        return Err(StoreError::Conflict {
            constraint: OTHER_AGENT.into(),
        });
    }
    if held.other {
        return match (held.gone && !held.job, held.active_turn) {
            (true, Some(holder)) => Ok(Begun::Abandoned(AbandonedTurn {
                holder,
                taken_at: held.lease_taken_at,
            })),
            _ => Err(StoreError::Conflict {
                constraint: BUSY.into(),
            }),
        };
    }
    let (messages, taken_at, handoff): (Value, OffsetDateTime, Option<Value>) = sqlx::query_as(
        "UPDATE conversations SET active_turn = $3, \
             lease_expires_at = now() + make_interval(secs => $4), lease_process = $5, \
             lease_taken_at = CASE WHEN active_turn IS NOT DISTINCT FROM $3 \
                                   THEN coalesce(lease_taken_at, now()) ELSE now() END \
         WHERE account_id = $1 AND id = $2 RETURNING messages, lease_taken_at, handoff",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(terms.holder)
    .bind(terms.lease.as_secs_f64())
    .bind(terms.process)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    let messages = match messages {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    Ok(Begun::Held {
        messages,
        taken_at,
        handoff,
    })
}

#[derive(FromRow)]
struct HeldBy {
    agent_id: Uuid,
    active_turn: Option<Uuid>,
    lease_taken_at: Option<OffsetDateTime>,
    other: bool,
    gone: bool,
    job: bool,
}

/// Stores what `rewrite` makes of the messages of `account`'s conversation
/// `id` and frees the conversation, if `abandoned`'s holder still holds it
/// (false: someone else recovered it first, or its holder came back and
/// finished). `rewrite` answers `None` to keep the messages as they are.
#[tracing::instrument(skip(pool, rewrite), fields(account.id = %account))]
pub async fn recover<F>(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    abandoned: AbandonedTurn,
    rewrite: F,
) -> Result<bool, StoreError>
where
    F: FnOnce(Vec<Value>) -> Option<Vec<Value>> + Send,
{
    let mut tx = pool.begin().await?;
    let found: Option<(Value,)> = sqlx::query_as(
        "SELECT messages FROM conversations \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3 FOR UPDATE",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(abandoned.holder)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((messages,)) = found else {
        return Ok(false);
    };
    let stored = match messages {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    let rewritten = rewrite(stored).map(|messages| Value::Array(messages).to_string());
    sqlx::query(
        "UPDATE conversations SET messages = coalesce($4::json, messages), \
             updated_at = CASE WHEN $4::text IS NULL THEN updated_at ELSE now() END, \
             active_turn = NULL, lease_expires_at = NULL, lease_process = NULL, \
             lease_taken_at = NULL \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(abandoned.holder)
    .bind(rewritten)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Who holds a conversation's lease, as a stop request sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Nobody (or no such conversation).
    Nobody,
    /// A live turn or job, under this id.
    Live(Uuid),
    /// A turn (not a job) whose process died, or whose lease lapsed.
    Abandoned(AbandonedTurn),
}

/// Who holds `account`'s conversation `id`.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn holder(pool: &PgPool, account: &AccountId, id: &str) -> Result<Holder, StoreError> {
    let found: Option<(Option<Uuid>, Option<OffsetDateTime>, bool, bool)> =
        sqlx::query_as(&format!(
            "SELECT c.active_turn, c.lease_taken_at, coalesce({HOLDER_GONE}, false), \
                    {HOLDER_IS_JOB} \
             FROM conversations c LEFT JOIN server_processes p ON p.id = c.lease_process \
             WHERE c.account_id = $1 AND c.id = $2"
        ))
        .bind(account.as_str())
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Ok(match found {
        Some((Some(holder), taken_at, true, false)) => {
            Holder::Abandoned(AbandonedTurn { holder, taken_at })
        }
        Some((Some(holder), _, _, _)) => Holder::Live(holder),
        _ => Holder::Nobody,
    })
}

/// A conversation held by a turn whose process died, to recover.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct HeldByTheDead {
    /// The owning account.
    pub account_id: String,
    /// The conversation.
    pub id: String,
    /// The lease's holder.
    pub holder: Uuid,
    /// When it took the lease.
    pub taken_at: Option<OffsetDateTime>,
}

impl HeldByTheDead {
    /// The lease to recover.
    pub fn abandoned(&self) -> AbandonedTurn {
        AbandonedTurn {
            holder: self.holder,
            taken_at: self.taken_at,
        }
    }
}

/// Up to `limit` conversations whose lease is held by a turn (not a job)
/// of a process that stopped renewing its row: found through the dead
/// processes, so the cost follows what they held, not the table's size.
pub async fn held_by_the_dead(pool: &PgPool, limit: i64) -> Result<Vec<HeldByTheDead>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT c.account_id, c.id, c.active_turn AS holder, c.lease_taken_at AS taken_at \
         FROM server_processes p JOIN conversations c ON c.lease_process = p.id \
         WHERE p.alive_until <= now() AND c.active_turn IS NOT NULL AND NOT {HOLDER_IS_JOB} \
         LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Stores the conversation's messages, if `turn_id` still holds the lease
/// (otherwise `NotFound`). Commits without waiting for the disk (see
/// [`crate::commit`]).
#[tracing::instrument(skip(pool, messages), fields(account.id = %account))]
pub async fn save(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
    messages: &[Value],
) -> Result<(), StoreError> {
    let done = sqlx::query(&SAVE_UNFLUSHED)
        .bind(account.as_str())
        .bind(id)
        .bind(turn_id)
        .bind(Value::Array(messages.to_vec()).to_string())
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// Extends the lease held by `turn_id` to `lease` from now; `NotFound` when
/// the turn no longer holds it.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn renew(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
    lease: Duration,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE conversations SET lease_expires_at = now() + make_interval(secs => $4) \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(turn_id)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// Releases the lease held by `turn_id`, removing the conversation if it
/// still has no message.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn end_turn(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
) -> Result<(), StoreError> {
    // A conversation that still has no message was created by this turn's
    // lease for a request that was then refused: it goes, rather than stay
    // behind empty and bound to the agent.
    let removed = sqlx::query(
        "DELETE FROM conversations \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3 \
           AND json_array_length(messages) = 0",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(turn_id)
    .execute(pool)
    .await?;
    if removed.rows_affected() > 0 {
        return Ok(());
    }
    sqlx::query(
        "UPDATE conversations SET active_turn = NULL, lease_expires_at = NULL, \
             lease_process = NULL, lease_taken_at = NULL \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(turn_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Reads one of `account`'s conversations.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
) -> Result<ConversationRecord, StoreError> {
    let row: ConversationRow = sqlx::query_as(
        "SELECT id, agent_id, messages, created_at, updated_at, handoff FROM conversations \
         WHERE account_id = $1 AND id = $2",
    )
    .bind(account.as_str())
    .bind(id)
    .fetch_one(pool)
    .await?;
    Ok(row.into())
}

/// The agent of one of `account`'s conversations (`NotFound`: no such
/// conversation), without reading its messages.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn agent_of(pool: &PgPool, account: &AccountId, id: &str) -> Result<AgentId, StoreError> {
    let (agent,): (Uuid,) =
        sqlx::query_as("SELECT agent_id FROM conversations WHERE account_id = $1 AND id = $2")
            .bind(account.as_str())
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(AgentId::from_uuid(agent))
}
