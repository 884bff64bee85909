//! The `conversations` table: the UI messages of each conversation, and a
//! lease so only one turn at a time writes to a conversation.

use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId};
use uuid::Uuid;

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
}

#[derive(FromRow)]
struct ConversationRow {
    id: String,
    agent_id: Uuid,
    messages: Value,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
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
        }
    }
}

/// Creates the conversation if new and takes its lease for `lease` as
/// `holder` (an unexpired lease of another holder is `Conflict { BUSY }`; a
/// holder may take its own lease again, as a retried job does; a
/// conversation of another agent is `Conflict { OTHER_AGENT }`). Returns
/// the stored messages; every later write names `holder`.
#[tracing::instrument(skip(pool), fields(account.id = %account, agent.id = %agent))]
pub async fn begin_turn(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    agent: AgentId,
    lease: Duration,
    holder: Uuid,
) -> Result<Vec<Value>, StoreError> {
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    sqlx::query(
        "INSERT INTO conversations (account_id, id, agent_id) VALUES ($1, $2, $3) \
         ON CONFLICT (account_id, id) DO NOTHING",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(agent.as_uuid())
    .execute(&mut *tx)
    .await?;
    let (owner, busy): (Uuid, bool) = sqlx::query_as(
        "SELECT agent_id, (active_turn IS NOT NULL AND active_turn <> $3 \
                           AND lease_expires_at > now()) \
         FROM conversations WHERE account_id = $1 AND id = $2 FOR UPDATE",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(holder)
    .fetch_one(&mut *tx)
    .await?;
    if owner != agent.as_uuid() {
        return Err(StoreError::Conflict {
            constraint: OTHER_AGENT.into(),
        });
    }
    if busy {
        return Err(StoreError::Conflict {
            constraint: BUSY.into(),
        });
    }
    let (messages,): (Value,) = sqlx::query_as(
        "UPDATE conversations SET active_turn = $3, \
             lease_expires_at = now() + make_interval(secs => $4) \
         WHERE account_id = $1 AND id = $2 RETURNING messages",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(holder)
    .bind(lease.as_secs_f64())
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(match messages {
        Value::Array(items) => items,
        _ => Vec::new(),
    })
}

/// Stores the conversation's messages, if `turn_id` still holds the lease
/// (otherwise `NotFound`).
#[tracing::instrument(skip(pool, messages), fields(account.id = %account))]
pub async fn save(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
    messages: &[Value],
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE conversations SET messages = $4::json, updated_at = now() \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3",
    )
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
        "UPDATE conversations SET active_turn = NULL, lease_expires_at = NULL \
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
        "SELECT id, agent_id, messages, created_at, updated_at FROM conversations \
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
