//! The `oauth_connections` table: one end user's tokens at one of the
//! account's OAuth providers (`migrations/0028_oauth_connections.sql`).
//! Tokens are kept sealed; sealing and opening are the caller's. A refresh
//! runs under [`lock`], so one connection is refreshed once at a time, and
//! ends in [`record_refreshed`] or, when it failed for good,
//! [`record_failed`].

use sqlx::{FromRow, PgConnection, PgPool};
use time::OffsetDateTime;
use toolserver_domain::AccountId;

use crate::text::storable;
use crate::StoreError;

/// Columns of a [`ConnectionRecord`], in its field order.
const COLUMNS: &str = "account_id, provider, user_id, access_sealed, refresh_sealed, \
     expires_at, scopes, status, last_error, refreshed_at, created_at, updated_at";

/// A connection as stored.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct ConnectionRecord {
    /// The account.
    pub account_id: String,
    /// The provider's name.
    pub provider: String,
    /// The end user the tokens act for (`""`: the account itself).
    pub user_id: String,
    /// The access token, sealed.
    pub access_sealed: Vec<u8>,
    /// The refresh token, sealed (`None`: it cannot be refreshed).
    pub refresh_sealed: Option<Vec<u8>>,
    /// When the access token expires (`None`: the provider gave no expiry).
    pub expires_at: Option<OffsetDateTime>,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// `active` or `failed` (its refresh failed for good).
    pub status: String,
    /// Why its refresh failed, when it did.
    pub last_error: Option<String>,
    /// When its tokens were last refreshed (`None`: not since they were
    /// authorized).
    pub refreshed_at: Option<OffsetDateTime>,
    /// When it was first authorized.
    pub created_at: OffsetDateTime,
    /// When it last changed.
    pub updated_at: OffsetDateTime,
}

/// Tokens a provider gave, sealed.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    /// The access token, sealed.
    pub access_sealed: &'a [u8],
    /// The refresh token, sealed, if one was given.
    pub refresh_sealed: Option<&'a [u8]>,
    /// When the access token expires (`None`: no expiry was given).
    pub expires_at: Option<OffsetDateTime>,
    /// The scopes granted.
    pub scopes: &'a [String],
}

/// Stores a connection's tokens after an authorization (status active,
/// last_error cleared): `tokens` replace every token of a connection there
/// was (a `refresh_sealed` of `None` leaves none: the new grant may be
/// another identity's), and `refreshed_at` is cleared. The provider must
/// be registered ([`StoreError::NotFound`] when it is not).
pub async fn upsert(
    tx: &mut PgConnection,
    account: &AccountId,
    provider: &str,
    user: &str,
    tokens: &Tokens<'_>,
) -> Result<ConnectionRecord, StoreError> {
    Ok(sqlx::query_as(&format!(
        "INSERT INTO oauth_connections (account_id, provider, user_id, access_sealed, \
             refresh_sealed, expires_at, scopes) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (account_id, provider, user_id) DO UPDATE \
             SET access_sealed = EXCLUDED.access_sealed, \
                 refresh_sealed = EXCLUDED.refresh_sealed, \
                 expires_at = EXCLUDED.expires_at, \
                 scopes = EXCLUDED.scopes, \
                 status = 'active', \
                 last_error = NULL, \
                 refreshed_at = NULL, \
                 updated_at = now() \
         RETURNING {COLUMNS}"
    ))
    .bind(account.as_str())
    .bind(provider)
    .bind(user)
    .bind(tokens.access_sealed)
    .bind(tokens.refresh_sealed)
    .bind(tokens.expires_at)
    .bind(tokens.scopes)
    .fetch_one(&mut *tx)
    .await?)
}

/// `account`'s connection of `user` at `provider`;
/// [`StoreError::NotFound`] when there is none.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    provider: &str,
    user: &str,
) -> Result<ConnectionRecord, StoreError> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_connections \
         WHERE account_id = $1 AND provider = $2 AND user_id = $3"
    ))
    .bind(account.as_str())
    .bind(provider)
    .bind(user)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound)
}

/// `account`'s connections, those of `user` only when given, by provider
/// then user.
pub async fn list(
    pool: &PgPool,
    account: &AccountId,
    user: Option<&str>,
) -> Result<Vec<ConnectionRecord>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_connections \
         WHERE account_id = $1 AND ($2::text IS NULL OR user_id = $2) \
         ORDER BY provider, user_id"
    ))
    .bind(account.as_str())
    .bind(user)
    .fetch_all(pool)
    .await?)
}

/// Deletes `account`'s connection of `user` at `provider`;
/// [`StoreError::NotFound`] when there is none.
pub async fn delete(
    pool: &PgPool,
    account: &AccountId,
    provider: &str,
    user: &str,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "DELETE FROM oauth_connections WHERE account_id = $1 AND provider = $2 AND user_id = $3",
    )
    .bind(account.as_str())
    .bind(provider)
    .bind(user)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// The row locked FOR UPDATE, so one refresh at a time (NotFound when
/// none): the lock is held until `tx` ends, and a second refresher waits
/// for it, then reads what the first stored.
pub async fn lock(
    tx: &mut PgConnection,
    account: &AccountId,
    provider: &str,
    user: &str,
) -> Result<ConnectionRecord, StoreError> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_connections \
         WHERE account_id = $1 AND provider = $2 AND user_id = $3 FOR UPDATE"
    ))
    .bind(account.as_str())
    .bind(provider)
    .bind(user)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(StoreError::NotFound)
}

/// After a refresh: new access token, expiry, scopes (empty slice keeps
/// the old ones), refreshed_at = now(), status active, last_error NULL; a
/// `refresh_sealed` of None keeps the old refresh token. NotFound when
/// there is no such connection.
pub async fn record_refreshed(
    tx: &mut PgConnection,
    account: &AccountId,
    provider: &str,
    user: &str,
    tokens: &Tokens<'_>,
) -> Result<ConnectionRecord, StoreError> {
    sqlx::query_as(&format!(
        "UPDATE oauth_connections \
         SET access_sealed = $4, \
             refresh_sealed = coalesce($5, refresh_sealed), \
             expires_at = $6, \
             scopes = CASE WHEN cardinality($7::text[]) = 0 THEN scopes ELSE $7 END, \
             status = 'active', \
             last_error = NULL, \
             refreshed_at = now(), \
             updated_at = now() \
         WHERE account_id = $1 AND provider = $2 AND user_id = $3 \
         RETURNING {COLUMNS}"
    ))
    .bind(account.as_str())
    .bind(provider)
    .bind(user)
    .bind(tokens.access_sealed)
    .bind(tokens.refresh_sealed)
    .bind(tokens.expires_at)
    .bind(tokens.scopes)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(StoreError::NotFound)
}

/// A refresh that failed for good: status failed, last_error (until the
/// user authorizes again). NotFound when there is no such connection.
pub async fn record_failed(
    tx: &mut PgConnection,
    account: &AccountId,
    provider: &str,
    user: &str,
    error: &str,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE oauth_connections \
         SET status = 'failed', last_error = $4, updated_at = now() \
         WHERE account_id = $1 AND provider = $2 AND user_id = $3",
    )
    .bind(account.as_str())
    .bind(provider)
    .bind(user)
    .bind(storable(error))
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// Active connections with a refresh token whose access token expires
/// within `within_secs` (f64 seconds) from now (or has expired), oldest
/// expiry first, of any account, up to `limit`: (account_id, provider,
/// user_id). One with no expiry is never due.
pub async fn due_for_refresh(
    pool: &PgPool,
    within_secs: f64,
    limit: i64,
) -> Result<Vec<(String, String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT account_id, provider, user_id FROM oauth_connections \
         WHERE status = 'active' AND refresh_sealed IS NOT NULL \
           AND expires_at <= now() + make_interval(secs => $1) \
         ORDER BY expires_at LIMIT $2",
    )
    .bind(within_secs)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}
