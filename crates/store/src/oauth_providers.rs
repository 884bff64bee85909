//! The `oauth_providers` table: the OAuth providers an account's tools use,
//! by name (`migrations/0028_oauth_connections.sql`). The client secret is
//! kept sealed; sealing and opening are the caller's.

use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::AccountId;

use crate::{accounts, StoreError};

/// Columns of an [`OAuthProviderRecord`], in its field order.
const COLUMNS: &str = "name, authorization_url, token_url, client_id, client_secret_sealed, \
     scopes, webhook, created_at, updated_at";

/// A provider as stored.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct OAuthProviderRecord {
    /// Its name, unique in its account.
    pub name: String,
    /// Where users are sent to authorize.
    pub authorization_url: String,
    /// Where codes and refresh tokens are exchanged for tokens.
    pub token_url: String,
    /// The account's client id at the provider.
    pub client_id: String,
    /// The client secret, sealed (`None`: a public client).
    pub client_secret_sealed: Option<Vec<u8>>,
    /// The scopes asked for by default.
    pub scopes: Vec<String>,
    /// Where connection failures are announced, if anywhere.
    pub webhook: Option<String>,
    /// When it was first registered.
    pub created_at: OffsetDateTime,
    /// When it last changed.
    pub updated_at: OffsetDateTime,
}

/// A provider to register or replace.
#[derive(Debug, Clone, Copy)]
pub struct NewOAuthProvider<'a> {
    /// Its name (`[A-Za-z0-9_]{1,64}`).
    pub name: &'a str,
    /// Where users are sent to authorize.
    pub authorization_url: &'a str,
    /// Where codes and refresh tokens are exchanged for tokens.
    pub token_url: &'a str,
    /// The account's client id at the provider.
    pub client_id: &'a str,
    /// The client secret, sealed (`None`: a public client).
    pub client_secret_sealed: Option<&'a [u8]>,
    /// The scopes asked for by default.
    pub scopes: &'a [String],
    /// Where connection failures are announced, if anywhere.
    pub webhook: Option<&'a str>,
}

/// Registers `provider` for `account` (recording the account if it is
/// new), or replaces every field of the one of that name: the provider as
/// stored, and whether it was created (true) or replaced (false). The
/// caller bounds an account's count with [`count`].
pub async fn put(
    pool: &PgPool,
    account: &AccountId,
    provider: &NewOAuthProvider<'_>,
) -> Result<(OAuthProviderRecord, bool), StoreError> {
    #[derive(FromRow)]
    struct Put {
        #[sqlx(flatten)]
        record: OAuthProviderRecord,
        created: bool,
    }
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    let put: Put = sqlx::query_as(&format!(
        "INSERT INTO oauth_providers (account_id, name, authorization_url, token_url, \
             client_id, client_secret_sealed, scopes, webhook) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (account_id, name) DO UPDATE \
             SET authorization_url = EXCLUDED.authorization_url, \
                 token_url = EXCLUDED.token_url, \
                 client_id = EXCLUDED.client_id, \
                 client_secret_sealed = EXCLUDED.client_secret_sealed, \
                 scopes = EXCLUDED.scopes, \
                 webhook = EXCLUDED.webhook, \
                 updated_at = now() \
         RETURNING {COLUMNS}, (xmax = 0) AS created"
    ))
    .bind(account.as_str())
    .bind(provider.name)
    .bind(provider.authorization_url)
    .bind(provider.token_url)
    .bind(provider.client_id)
    .bind(provider.client_secret_sealed)
    .bind(provider.scopes)
    .bind(provider.webhook)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((put.record, put.created))
}

/// `account`'s provider `name`; [`StoreError::NotFound`] when there is
/// none.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    name: &str,
) -> Result<OAuthProviderRecord, StoreError> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_providers WHERE account_id = $1 AND name = $2"
    ))
    .bind(account.as_str())
    .bind(name)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound)
}

/// Every provider of `account`, by name.
pub async fn list(
    pool: &PgPool,
    account: &AccountId,
) -> Result<Vec<OAuthProviderRecord>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_providers WHERE account_id = $1 ORDER BY name"
    ))
    .bind(account.as_str())
    .fetch_all(pool)
    .await?)
}

/// Deletes `account`'s provider `name`, with its connections and
/// authorizations; [`StoreError::NotFound`] when there is none.
pub async fn delete(pool: &PgPool, account: &AccountId, name: &str) -> Result<(), StoreError> {
    let done = sqlx::query("DELETE FROM oauth_providers WHERE account_id = $1 AND name = $2")
        .bind(account.as_str())
        .bind(name)
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// How many providers `account` has registered.
pub async fn count(pool: &PgPool, account: &AccountId) -> Result<i64, StoreError> {
    let (count,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM oauth_providers WHERE account_id = $1")
            .bind(account.as_str())
            .fetch_one(pool)
            .await?;
    Ok(count)
}
