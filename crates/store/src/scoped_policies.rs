//! The `scoped_policies` table: policy text narrowing the calls made for
//! one end user, or in one conversation, of an account
//! (`migrations/0026_scoped_policies.sql`). Every change notifies
//! [`crate::config_changes::CHANNEL`] (`migrations/0031_turn_config_notify.sql`).

use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::AccountId;

use crate::text::storable;
use crate::{accounts, StoreError};

/// What a scoped layer narrows for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyScope {
    /// One end user (a token's `sub`).
    User,
    /// One conversation.
    Conversation,
}

impl PolicyScope {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Conversation => "conversation",
        }
    }

    /// The scope stored as `raw` (the table allows only the two).
    fn stored(raw: &str) -> Self {
        match raw {
            "user" => Self::User,
            _ => Self::Conversation,
        }
    }
}

/// A scoped layer as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedPolicyRecord {
    /// The Cedar text as saved.
    pub text: String,
    /// Saves so far (from 1).
    pub version: i64,
    /// When it was last saved.
    pub updated_at: OffsetDateTime,
}

/// The layer `account` keeps for `scope` `id`, if it ever saved one.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    scope: PolicyScope,
    id: &str,
) -> Result<Option<ScopedPolicyRecord>, StoreError> {
    let row: Option<(String, i64, OffsetDateTime)> = sqlx::query_as(
        "SELECT policies, version, updated_at FROM scoped_policies \
         WHERE account_id = $1 AND scope = $2 AND scope_id = $3",
    )
    .bind(account.as_str())
    .bind(scope.as_str())
    .bind(storable(id))
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(text, version, updated_at)| ScopedPolicyRecord {
        text,
        version,
        updated_at,
    }))
}

/// Stores `text` as the whole of `account`'s layer for `scope` `id`
/// (recording the account if it is new); the record as saved.
pub async fn put(
    pool: &PgPool,
    account: &AccountId,
    (scope, id): (PolicyScope, &str),
    text: &str,
) -> Result<ScopedPolicyRecord, StoreError> {
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    let (version, updated_at): (i64, OffsetDateTime) = sqlx::query_as(
        "INSERT INTO scoped_policies (account_id, scope, scope_id, policies) \
         VALUES ($1, $2, $3, $4) \
         ON CONFLICT (account_id, scope, scope_id) DO UPDATE SET policies = EXCLUDED.policies, \
             version = scoped_policies.version + 1, updated_at = now() \
         RETURNING version, updated_at",
    )
    .bind(account.as_str())
    .bind(scope.as_str())
    .bind(storable(id))
    .bind(text)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(ScopedPolicyRecord {
        text: text.to_owned(),
        version,
        updated_at,
    })
}

/// The non-empty layers of `account` for the end user `user` and the
/// conversation `conversation` (either may be absent), the user's first:
/// one read.
pub async fn for_call(
    pool: &PgPool,
    account: &AccountId,
    user: Option<&str>,
    conversation: Option<&str>,
) -> Result<Vec<(PolicyScope, String)>, StoreError> {
    if user.is_none() && conversation.is_none() {
        return Ok(Vec::new());
    }
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT scope, policies FROM scoped_policies \
         WHERE account_id = $1 AND policies <> '' \
           AND ((scope = 'user' AND scope_id = $2) \
             OR (scope = 'conversation' AND scope_id = $3)) \
         ORDER BY scope DESC",
    )
    .bind(account.as_str())
    .bind(user.map(storable))
    .bind(conversation.map(storable))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(scope, text)| (PolicyScope::stored(&scope), text))
        .collect())
}

/// A non-empty layer of an account, with whom it narrows for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedLayer {
    /// What it narrows for.
    pub scope: PolicyScope,
    /// The end user or conversation, as stored (see [`storable`]).
    pub scope_id: String,
    /// The Cedar text.
    pub text: String,
}

/// Up to `limit` of `account`'s non-empty layers, whatever they narrow
/// for, and whether it has more: one read.
pub async fn in_force(
    pool: &PgPool,
    account: &AccountId,
    limit: u32,
) -> Result<(Vec<ScopedLayer>, bool), StoreError> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT scope, scope_id, policies FROM scoped_policies \
         WHERE account_id = $1 AND policies <> '' \
         ORDER BY scope, scope_id LIMIT $2",
    )
    .bind(account.as_str())
    .bind(i64::from(limit) + 1)
    .fetch_all(pool)
    .await?;
    let more = rows.len() > limit as usize;
    let layers = rows
        .into_iter()
        .take(limit as usize)
        .map(|(scope, scope_id, text)| ScopedLayer {
            scope: PolicyScope::stored(&scope),
            scope_id,
            text,
        })
        .collect();
    Ok((layers, more))
}
