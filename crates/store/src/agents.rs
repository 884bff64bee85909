//! The `agents` table: configs with their credentials sealed apart.

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId, AgentName};
use uuid::Uuid;

use crate::{accounts, StoreError};

/// A stored agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRecord {
    /// Public id.
    pub id: AgentId,
    /// Human-facing name.
    pub name: String,
    /// The config, credentials redacted.
    pub config: Value,
    /// The sealed credentials, if any.
    pub sealed_secrets: Option<Vec<u8>>,
    /// Starts at 1; every update adds one.
    pub version: i32,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// Last change.
    pub updated_at: OffsetDateTime,
}

/// An agent to store: a validated name, a redacted config and sealed credentials.
#[derive(Debug, Clone)]
pub struct AgentWrite {
    /// Human-facing name.
    pub name: AgentName,
    /// The config, credentials redacted.
    pub config: Value,
    /// The sealed credentials, if any.
    pub sealed_secrets: Option<Vec<u8>>,
}

#[derive(FromRow)]
struct AgentRow {
    id: Uuid,
    name: String,
    config: Value,
    secrets: Option<Vec<u8>>,
    version: i32,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

impl From<AgentRow> for AgentRecord {
    fn from(row: AgentRow) -> Self {
        Self {
            id: AgentId::from_uuid(row.id),
            name: row.name,
            config: row.config,
            sealed_secrets: row.secrets,
            version: row.version,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

const COLUMNS: &str = "id, name, config, secrets, version, created_at, updated_at";

/// Inserts an agent with a chosen id (the id is bound into the sealed credentials).
#[tracing::instrument(skip(pool, agent), fields(account.id = %account, agent.id = %id))]
pub async fn insert(
    pool: &PgPool,
    account: &AccountId,
    id: AgentId,
    agent: AgentWrite,
) -> Result<AgentRecord, StoreError> {
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    let row: AgentRow = sqlx::query_as(&format!(
        "INSERT INTO agents (id, account_id, name, config, secrets) \
         VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}"
    ))
    .bind(id.as_uuid())
    .bind(account.as_str())
    .bind(agent.name.as_str())
    .bind(&agent.config)
    .bind(&agent.sealed_secrets)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row.into())
}

/// Reads one of `account`'s agents.
#[tracing::instrument(skip(pool), fields(account.id = %account, agent.id = %id))]
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: AgentId,
) -> Result<AgentRecord, StoreError> {
    let row: AgentRow = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM agents WHERE account_id = $1 AND id = $2"
    ))
    .bind(account.as_str())
    .bind(id.as_uuid())
    .fetch_one(pool)
    .await?;
    Ok(row.into())
}

/// The account that owns agent `id`, whichever it is: for a request that
/// names the agent and proves itself otherwise (a channel's signature).
pub async fn owner(pool: &PgPool, id: AgentId) -> Result<AccountId, StoreError> {
    let (account,): (String,) = sqlx::query_as("SELECT account_id FROM agents WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_one(pool)
        .await?;
    AccountId::parse(&account)
        .map_err(|err| StoreError::Other(sqlx::Error::Decode(err.to_string().into())))
}

/// One page of `account`'s agents in creation order, after `after`; and whether more follow.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn list(
    pool: &PgPool,
    account: &AccountId,
    after: Option<AgentId>,
    limit: u32,
) -> Result<(Vec<AgentRecord>, bool), StoreError> {
    let rows: Vec<AgentRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM agents \
         WHERE account_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3"
    ))
    .bind(account.as_str())
    .bind(after.map(|id| id.as_uuid()))
    .bind(i64::from(limit) + 1)
    .fetch_all(pool)
    .await?;
    let has_more = rows.len() > limit as usize;
    Ok((
        rows.into_iter()
            .take(limit as usize)
            .map(Into::into)
            .collect(),
        has_more,
    ))
}

/// Replaces an agent's name, config and credentials, bumping its version.
#[tracing::instrument(skip(pool, agent), fields(account.id = %account, agent.id = %id))]
pub async fn update(
    pool: &PgPool,
    account: &AccountId,
    id: AgentId,
    agent: AgentWrite,
) -> Result<AgentRecord, StoreError> {
    let row: AgentRow = sqlx::query_as(&format!(
        "UPDATE agents SET name = $3, config = $4, secrets = $5, version = version + 1, \
             updated_at = now() \
         WHERE account_id = $1 AND id = $2 RETURNING {COLUMNS}"
    ))
    .bind(account.as_str())
    .bind(id.as_uuid())
    .bind(agent.name.as_str())
    .bind(&agent.config)
    .bind(&agent.sealed_secrets)
    .fetch_one(pool)
    .await?;
    Ok(row.into())
}

/// Deletes one of `account`'s agents and its conversations.
///
/// The rows the cascade reaches are locked first, in the order turns take
/// them (the agent, its conversations, its detached turns), so a turn
/// committing on one of its conversations finishes before the delete goes
/// on instead of deadlocking with it; a deadlock with any other writer is
/// retried.
#[tracing::instrument(skip(pool), fields(account.id = %account, agent.id = %id))]
pub async fn delete(pool: &PgPool, account: &AccountId, id: AgentId) -> Result<(), StoreError> {
    crate::error::retrying_deadlocks(|| delete_once(pool, account, id)).await
}

async fn delete_once(pool: &PgPool, account: &AccountId, id: AgentId) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let found: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM agents WHERE account_id = $1 AND id = $2 FOR UPDATE")
            .bind(account.as_str())
            .bind(id.as_uuid())
            .fetch_optional(&mut *tx)
            .await?;
    if found.is_none() {
        return Err(StoreError::NotFound);
    }
    for lock in [
        "SELECT 1 FROM conversations WHERE account_id = $1 AND agent_id = $2 ORDER BY id FOR UPDATE",
        "SELECT 1 FROM async_turns WHERE account_id = $1 AND agent_id = $2 ORDER BY id FOR UPDATE",
    ] {
        sqlx::query(lock)
            .bind(account.as_str())
            .bind(id.as_uuid())
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("DELETE FROM agents WHERE account_id = $1 AND id = $2")
        .bind(account.as_str())
        .bind(id.as_uuid())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
