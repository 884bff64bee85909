//! Accounts are created on first sight of a valid token.

use sqlx::PgExecutor;
use toolserver_domain::AccountId;

use crate::StoreError;

/// Records `account` if it is new; a no-op for a known account.
#[tracing::instrument(skip(db), fields(account.id = %account))]
pub async fn ensure<'e>(db: impl PgExecutor<'e>, account: &AccountId) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO accounts (id) VALUES ($1) ON CONFLICT (id) DO NOTHING")
        .bind(account.as_str())
        .execute(db)
        .await?;
    Ok(())
}
