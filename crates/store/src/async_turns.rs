//! The `async_turns` table: the status of detached turns, settled once.

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId};
use uuid::Uuid;

use crate::{accounts, StoreError};

/// A detached turn's status.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AsyncTurnRecord {
    /// The status id.
    pub id: Uuid,
    /// The agent.
    pub agent_id: Uuid,
    /// The conversation it runs on.
    pub conversation_id: String,
    /// `running`, `waiting`, `completed` or `failed`.
    pub status: String,
    /// The conversation's messages, once completed.
    pub messages: Option<Value>,
    /// What went wrong, once failed.
    pub error: Option<String>,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// Last change.
    pub updated_at: OffsetDateTime,
}

/// Records a new running turn; returns its status id.
pub async fn create(
    pool: &PgPool,
    account: &AccountId,
    agent: AgentId,
    conversation_id: &str,
    reply_subject: Option<&str>,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    sqlx::query(
        "INSERT INTO async_turns (id, account_id, agent_id, conversation_id, reply_subject) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(account.as_str())
    .bind(agent.as_uuid())
    .bind(conversation_id)
    .bind(reply_subject)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// Marks an unsettled turn `running` or `waiting`.
pub async fn mark(pool: &PgPool, id: Uuid, status: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE async_turns SET status = $2, updated_at = now() WHERE id = $1 AND settle_event_id IS NULL")
        .bind(id)
        .bind(status)
        .execute(pool)
        .await?;
    Ok(())
}

/// Settles the turn once: `messages` when completed, `error` when failed.
/// Returns false when another settlement already won.
pub async fn settle(
    pool: &PgPool,
    id: Uuid,
    event_id: Uuid,
    outcome: Result<&Value, &str>,
) -> Result<bool, StoreError> {
    let (status, messages, error) = match outcome {
        Ok(messages) => ("completed", Some(messages), None),
        Err(error) => ("failed", None, Some(error)),
    };
    let done = sqlx::query(
        "UPDATE async_turns SET status = $3, messages = $4, error = $5, settle_event_id = $2, \
             updated_at = now() \
         WHERE id = $1 AND settle_event_id IS NULL",
    )
    .bind(id)
    .bind(event_id)
    .bind(status)
    .bind(messages)
    .bind(error)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Reads one of `account`'s detached turns.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: Uuid,
) -> Result<AsyncTurnRecord, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, agent_id, conversation_id, status, messages, error, created_at, updated_at \
         FROM async_turns WHERE account_id = $1 AND id = $2",
    )
    .bind(account.as_str())
    .bind(id)
    .fetch_one(pool)
    .await?)
}

/// Reads a detached turn by id alone (for the continuation runner), with its account.
pub async fn get_any(pool: &PgPool, id: Uuid) -> Result<(AccountId, AsyncTurnRecord), StoreError> {
    let account: (String,) = sqlx::query_as("SELECT account_id FROM async_turns WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await?;
    let account = AccountId::parse(&account.0)
        .map_err(|err| StoreError::Other(sqlx::Error::Decode(err.to_string().into())))?;
    let record = get(pool, &account, id).await?;
    Ok((account, record))
}

/// Where to publish a NATS-requested turn's final result, if anywhere.
pub async fn reply_subject(pool: &PgPool, id: Uuid) -> Result<Option<String>, StoreError> {
    let (subject,): (Option<String>,) =
        sqlx::query_as("SELECT reply_subject FROM async_turns WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(subject)
}
