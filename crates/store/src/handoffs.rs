//! Conversations handed to people (the `handoff` column of
//! `conversations`): set by the `handoff` tool together with its
//! announcement, cleared when a person releases the conversation.

use serde_json::Value;
use sqlx::PgPool;
use toolserver_domain::AccountId;

use crate::webhook_deliveries::{self, NewDelivery};
use crate::StoreError;

/// The `kind` of a handoff's announcement in `webhook_deliveries`.
pub const ANNOUNCEMENT: &str = "handoff";

/// Hands `account`'s conversation `conversation` to people: stores
/// `handoff` and records `announcement`, if any, in one transaction
/// (`NotFound`: no such conversation).
pub async fn hand_off(
    pool: &PgPool,
    account: &AccountId,
    conversation: &str,
    handoff: &Value,
    announcement: Option<&NewDelivery>,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let updated =
        sqlx::query("UPDATE conversations SET handoff = $3 WHERE account_id = $1 AND id = $2")
            .bind(account.as_str())
            .bind(conversation)
            .bind(handoff)
            .execute(&mut *tx)
            .await?;
    if updated.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    if let Some(announcement) = announcement {
        webhook_deliveries::insert(&mut tx, account, conversation, announcement).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Gives `account`'s conversation `conversation` back to its agent; the
/// handoff it was under, if any (`NotFound`: no such conversation).
pub async fn release(
    pool: &PgPool,
    account: &AccountId,
    conversation: &str,
) -> Result<Option<Value>, StoreError> {
    let (released,): (Option<Value>,) = sqlx::query_as(
        "WITH before AS (SELECT handoff FROM conversations \
                         WHERE account_id = $1 AND id = $2 FOR UPDATE) \
         UPDATE conversations SET handoff = NULL FROM before \
         WHERE account_id = $1 AND id = $2 RETURNING before.handoff",
    )
    .bind(account.as_str())
    .bind(conversation)
    .fetch_one(pool)
    .await?;
    Ok(released)
}
