//! The `channel_events` table: messages that arrived through an agent's
//! chat channel, each recorded once by its platform event id and started
//! as a detached turn from its row. The request that records an event
//! holds a claim on it and starts it at once; an event it could not start
//! (its conversation was busy, its process died) is claimed again later.

use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};
use toolserver_domain::{AccountId, AgentId};
use uuid::Uuid;

use crate::webhook_deliveries::{self, NewDelivery};
use crate::StoreError;

/// An event to record.
#[derive(Debug, Clone)]
pub struct NewChannelEvent<'a> {
    /// Its id.
    pub id: Uuid,
    /// The agent's account.
    pub account: &'a AccountId,
    /// The agent the channel belongs to.
    pub agent: AgentId,
    /// The channel's name in the agent's config.
    pub channel: &'a str,
    /// The platform's own id of the event (retries carry the same).
    pub event_key: &'a str,
    /// The conversation the event continues.
    pub conversation_id: &'a str,
    /// The user message (a UI message).
    pub message: &'a Value,
    /// Where answers go (the platform's thread or chat).
    pub reply_to: &'a Value,
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ChannelEvent {
    /// Its id.
    pub id: Uuid,
    /// The agent's account.
    pub account_id: String,
    /// The agent.
    pub agent_id: Uuid,
    /// The channel's name.
    pub channel: String,
    /// The conversation it continues.
    pub conversation_id: String,
    /// The user message.
    pub message: Value,
    /// Where answers go.
    pub reply_to: Value,
    /// Attempts to start it so far.
    pub attempts: i32,
    /// Its turn, once started.
    pub turn_id: Option<Uuid>,
}

const COLUMNS: &str =
    "id, account_id, agent_id, channel, conversation_id, message, reply_to, attempts, turn_id";

/// Records `event`, claimed by the caller for `claim`; `None` when the
/// channel had recorded it already (a platform's retry).
pub async fn record(
    pool: &PgPool,
    event: &NewChannelEvent<'_>,
    claim: Duration,
) -> Result<Option<ChannelEvent>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "INSERT INTO channel_events (id, account_id, agent_id, channel, event_key, \
             conversation_id, message, reply_to, attempts, claimed_until) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, now() + make_interval(secs => $9)) \
         ON CONFLICT (agent_id, channel, event_key) DO NOTHING RETURNING {COLUMNS}"
    ))
    .bind(event.id)
    .bind(event.account.as_str())
    .bind(event.agent.as_uuid())
    .bind(event.channel)
    .bind(event.event_key)
    .bind(event.conversation_id)
    .bind(event.message)
    .bind(event.reply_to)
    .bind(claim.as_secs_f64())
    .fetch_optional(pool)
    .await?)
}

/// Claims up to `limit` events not started yet whose time has come and
/// whose last claim lapsed, oldest first, for `claim`.
pub async fn claim_unstarted(
    pool: &PgPool,
    limit: i64,
    claim: Duration,
) -> Result<Vec<ChannelEvent>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "UPDATE channel_events SET attempts = attempts + 1, \
             claimed_until = now() + make_interval(secs => $2) \
         WHERE id IN (SELECT id FROM channel_events \
                      WHERE turn_id IS NULL AND failed_at IS NULL \
                        AND next_attempt_at <= now() \
                        AND (claimed_until IS NULL OR claimed_until < now()) \
                      ORDER BY received_at LIMIT $1 FOR UPDATE SKIP LOCKED) \
         RETURNING {COLUMNS}"
    ))
    .bind(limit)
    .bind(claim.as_secs_f64())
    .fetch_all(pool)
    .await?)
}

/// Marks event `id` started as turn `turn_id`, inside the transaction that
/// records the turn; false when it was started already (the caller rolls
/// back).
pub async fn mark_started(
    conn: &mut PgConnection,
    id: Uuid,
    turn_id: Uuid,
) -> Result<bool, StoreError> {
    let started = sqlx::query(
        "UPDATE channel_events SET turn_id = $2, claimed_until = NULL, last_error = NULL \
         WHERE id = $1 AND turn_id IS NULL",
    )
    .bind(id)
    .bind(turn_id)
    .execute(conn)
    .await?;
    Ok(started.rows_affected() == 1)
}

/// Lets event `id` be claimed again after `wait` (`error`: why it could
/// not start now).
pub async fn postpone(
    pool: &PgPool,
    id: Uuid,
    wait: Duration,
    error: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE channel_events SET claimed_until = NULL, last_error = $3, \
             next_attempt_at = now() + make_interval(secs => $2) \
         WHERE id = $1 AND turn_id IS NULL",
    )
    .bind(id)
    .bind(wait.as_secs_f64())
    .bind(error)
    .execute(pool)
    .await?;
    Ok(())
}

/// Gives `event` up: it can never start (`error` says why); `notice`, if
/// any, is recorded to tell the channel so, in the same transaction.
pub async fn give_up(
    pool: &PgPool,
    event: &ChannelEvent,
    error: &str,
    notice: Option<&NewDelivery>,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let given_up = sqlx::query(
        "UPDATE channel_events SET claimed_until = NULL, failed_at = now(), last_error = $2 \
         WHERE id = $1 AND turn_id IS NULL AND failed_at IS NULL",
    )
    .bind(event.id)
    .bind(error)
    .execute(&mut *tx)
    .await?;
    if let (1, Some(notice)) = (given_up.rows_affected(), notice) {
        let account = AccountId::parse(&event.account_id)
            .map_err(|err| StoreError::Other(sqlx::Error::Decode(err.to_string().into())))?;
        webhook_deliveries::insert(&mut tx, &account, &event.conversation_id, notice).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Reads event `id`.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<ChannelEvent, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM channel_events WHERE id = $1"
    ))
    .bind(id)
    .fetch_one(pool)
    .await?)
}
