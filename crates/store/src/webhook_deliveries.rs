//! The `webhook_deliveries` table: posts that must reach a receiver, tried
//! until one is answered 2xx or the attempts run out, each outcome recorded.
//! A claim lasts a while, so the post of a server that died mid-attempt is
//! tried again by another.

use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};
use time::OffsetDateTime;
use toolserver_domain::AccountId;
use uuid::Uuid;

use crate::StoreError;

/// A post to make.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    /// Its id (sent as `Idempotency-Key`).
    pub id: Uuid,
    /// What it announces, e.g. `handoff` or `channel`.
    pub kind: &'static str,
    /// The receiver.
    pub url: String,
    /// The JSON body.
    pub body: Value,
}

/// A post due now, claimed for one attempt.
#[derive(Debug, Clone, FromRow)]
pub struct DueDelivery {
    /// Its id.
    pub id: Uuid,
    /// The account it is about.
    pub account_id: String,
    /// What it announces.
    pub kind: String,
    /// The receiver.
    pub url: String,
    /// The JSON body.
    pub body: Value,
    /// Attempts so far, this one included.
    pub attempts: i32,
}

/// What became of a post so far.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct DeliveryState {
    /// Its id.
    pub id: Uuid,
    /// Attempts so far.
    pub attempts: i32,
    /// When a receiver answered 2xx.
    pub delivered_at: Option<OffsetDateTime>,
    /// When it was given up after its last attempt.
    pub failed_at: Option<OffsetDateTime>,
    /// What went wrong the last time, if anything.
    pub last_error: Option<String>,
}

/// Records a post of `account`'s conversation `conversation`, due at once.
pub async fn insert(
    conn: &mut PgConnection,
    account: &AccountId,
    conversation: &str,
    delivery: &NewDelivery,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO webhook_deliveries (id, account_id, conversation_id, kind, url, body) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
    )
    .bind(delivery.id)
    .bind(account.as_str())
    .bind(conversation)
    .bind(delivery.kind)
    .bind(&delivery.url)
    .bind(&delivery.body)
    .execute(conn)
    .await?;
    Ok(())
}

/// Claims up to `limit` posts that are due and not claimed by a live
/// attempt, for `claim`; each claim counts as an attempt. Posts of one
/// conversation and kind go in the order they were recorded: one waits
/// while an earlier one is still being tried.
pub async fn claim_due(
    pool: &PgPool,
    limit: i64,
    claim: Duration,
) -> Result<Vec<DueDelivery>, StoreError> {
    Ok(sqlx::query_as(
        "UPDATE webhook_deliveries SET attempts = attempts + 1, \
             claimed_until = now() + make_interval(secs => $2) \
         WHERE id IN (SELECT id FROM webhook_deliveries due \
                      WHERE delivered_at IS NULL AND failed_at IS NULL \
                        AND next_attempt_at <= now() \
                        AND (claimed_until IS NULL OR claimed_until < now()) \
                        AND NOT EXISTS (SELECT 1 FROM webhook_deliveries earlier \
                            WHERE earlier.account_id = due.account_id \
                              AND earlier.conversation_id = due.conversation_id \
                              AND earlier.kind = due.kind \
                              AND earlier.delivered_at IS NULL AND earlier.failed_at IS NULL \
                              AND (earlier.created_at, earlier.id) < (due.created_at, due.id)) \
                      ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED) \
         RETURNING id, account_id, kind, url, body, attempts",
    )
    .bind(limit)
    .bind(claim.as_secs_f64())
    .fetch_all(pool)
    .await?)
}

/// Records that a receiver took post `id`.
pub async fn delivered(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE webhook_deliveries SET delivered_at = now(), claimed_until = NULL, \
             last_error = NULL WHERE id = $1",
    )
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Records a failed attempt at post `id`: tried again after `retry_in`, or
/// given up when `None`.
pub async fn attempt_failed(
    pool: &PgPool,
    id: Uuid,
    error: &str,
    retry_in: Option<Duration>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE webhook_deliveries SET last_error = $2, claimed_until = NULL, \
             next_attempt_at = now() + make_interval(secs => coalesce($3, 0)), \
             failed_at = CASE WHEN $3 IS NULL THEN now() END \
         WHERE id = $1",
    )
    .bind(id)
    .bind(error)
    .bind(retry_in.map(|wait| wait.as_secs_f64()))
    .execute(pool)
    .await?;
    Ok(())
}

/// The latest post of `kind` about `account`'s conversation `conversation`.
pub async fn latest(
    pool: &PgPool,
    account: &AccountId,
    conversation: &str,
    kind: &str,
) -> Result<Option<DeliveryState>, StoreError> {
    Ok(recent(pool, account, conversation, kind, 1).await?.pop())
}

/// The latest `limit` posts of `kind` about `account`'s conversation
/// `conversation`, newest first.
pub async fn recent(
    pool: &PgPool,
    account: &AccountId,
    conversation: &str,
    kind: &str,
    limit: i64,
) -> Result<Vec<DeliveryState>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, attempts, delivered_at, failed_at, last_error FROM webhook_deliveries \
         WHERE account_id = $1 AND conversation_id = $2 AND kind = $3 \
         ORDER BY created_at DESC, id DESC LIMIT $4",
    )
    .bind(account.as_str())
    .bind(conversation)
    .bind(kind)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}
