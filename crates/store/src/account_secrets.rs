//! The `account_secrets` table: an account's named secrets, sealed
//! (`migrations/0027_http_tools_and_secrets.sql`). Sealing and opening are
//! the caller's; this module only keeps the sealed bytes.

use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::AccountId;

use crate::{accounts, StoreError};

/// A secret as listed: its name and when it was set, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEntry {
    /// The secret's name.
    pub name: String,
    /// When it was first set.
    pub created_at: OffsetDateTime,
    /// When its value last changed.
    pub updated_at: OffsetDateTime,
}

/// Sets `name` to `sealed`: whether it was created (true) or its value
/// replaced (false). The caller bounds an account's count with [`count`].
pub async fn put(
    pool: &PgPool,
    account: &AccountId,
    name: &str,
    sealed: &[u8],
) -> Result<(SecretEntry, bool), StoreError> {
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    let (name, created_at, updated_at, created): (String, OffsetDateTime, OffsetDateTime, bool) =
        sqlx::query_as(
            "INSERT INTO account_secrets (account_id, name, sealed) VALUES ($1, $2, $3) \
             ON CONFLICT (account_id, name) DO UPDATE \
                 SET sealed = EXCLUDED.sealed, updated_at = now() \
             RETURNING name, created_at, updated_at, (xmax = 0)",
        )
        .bind(account.as_str())
        .bind(name)
        .bind(sealed)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    let entry = SecretEntry {
        name,
        created_at,
        updated_at,
    };
    Ok((entry, created))
}

/// How many secrets `account` keeps.
pub async fn count(pool: &PgPool, account: &AccountId) -> Result<i64, StoreError> {
    let (count,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM account_secrets WHERE account_id = $1")
            .bind(account.as_str())
            .fetch_one(pool)
            .await?;
    Ok(count)
}

/// Whether `account` keeps a secret called `name`.
pub async fn exists(pool: &PgPool, account: &AccountId, name: &str) -> Result<bool, StoreError> {
    let (found,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM account_secrets WHERE account_id = $1 AND name = $2)",
    )
    .bind(account.as_str())
    .bind(name)
    .fetch_one(pool)
    .await?;
    Ok(found)
}

/// Every secret of `account`, by name.
pub async fn list(pool: &PgPool, account: &AccountId) -> Result<Vec<SecretEntry>, StoreError> {
    let rows: Vec<(String, OffsetDateTime, OffsetDateTime)> = sqlx::query_as(
        "SELECT name, created_at, updated_at FROM account_secrets \
         WHERE account_id = $1 ORDER BY name",
    )
    .bind(account.as_str())
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(name, created_at, updated_at)| SecretEntry {
            name,
            created_at,
            updated_at,
        })
        .collect())
}

/// The sealed values of those of `names` that `account` keeps.
pub async fn sealed(
    pool: &PgPool,
    account: &AccountId,
    names: &[String],
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT name, sealed FROM account_secrets WHERE account_id = $1 AND name = ANY($2)",
    )
    .bind(account.as_str())
    .bind(names)
    .fetch_all(pool)
    .await?)
}

/// Deletes `account`'s secret `name`; [`StoreError::NotFound`] when there
/// is none.
pub async fn delete(pool: &PgPool, account: &AccountId, name: &str) -> Result<(), StoreError> {
    let done = sqlx::query("DELETE FROM account_secrets WHERE account_id = $1 AND name = $2")
        .bind(account.as_str())
        .bind(name)
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}
