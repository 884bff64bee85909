//! The `account_policies` table: one account's policy text and how many
//! times it was saved (`migrations/0024_policies.sql`). Every change
//! notifies [`crate::config_changes::CHANNEL`]
//! (`migrations/0031_turn_config_notify.sql`).

use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::AccountId;

use crate::{accounts, StoreError};

/// An account's stored policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRecord {
    /// The Cedar text as saved.
    pub text: String,
    /// Saves so far (from 1).
    pub version: i64,
    /// When it was last saved.
    pub updated_at: OffsetDateTime,
    /// Where new approvals are announced, if anywhere.
    pub approval_webhook: Option<String>,
}

/// The policies of `account`, if it ever saved any.
pub async fn get(pool: &PgPool, account: &AccountId) -> Result<Option<PolicyRecord>, StoreError> {
    let row: Option<(String, i64, OffsetDateTime, Option<String>)> = sqlx::query_as(
        "SELECT policies, version, updated_at, approval_webhook FROM account_policies \
         WHERE account_id = $1",
    )
    .bind(account.as_str())
    .fetch_optional(pool)
    .await?;
    Ok(row.map(
        |(text, version, updated_at, approval_webhook)| PolicyRecord {
            text,
            version,
            updated_at,
            approval_webhook,
        },
    ))
}

/// Stores `text` as the whole of `account`'s policies, and where its new
/// approvals are announced (recording the account if it is new); the
/// record as saved.
pub async fn put(
    pool: &PgPool,
    account: &AccountId,
    text: &str,
    approval_webhook: Option<&str>,
) -> Result<PolicyRecord, StoreError> {
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    let (version, updated_at): (i64, OffsetDateTime) = sqlx::query_as(
        "INSERT INTO account_policies (account_id, policies, approval_webhook) \
         VALUES ($1, $2, $3) \
         ON CONFLICT (account_id) DO UPDATE SET policies = EXCLUDED.policies, \
             approval_webhook = EXCLUDED.approval_webhook, \
             version = account_policies.version + 1, updated_at = now() \
         RETURNING version, updated_at",
    )
    .bind(account.as_str())
    .bind(text)
    .bind(approval_webhook)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(PolicyRecord {
        text: text.to_owned(),
        version,
        updated_at,
        approval_webhook: approval_webhook.map(str::to_owned),
    })
}
