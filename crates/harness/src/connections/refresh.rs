//! Refreshing connections: one at a time per connection (its row locked
//! while the token endpoint answers), before the access token lapses. A
//! refresh the provider refuses (a revoked or expired refresh token) marks
//! the connection failed and queues a `connection.refresh_failed`
//! announcement on the provider's webhook; one that cannot reach the
//! provider changes nothing and is tried again.

use std::time::Duration;

use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::oauth_connections::{self, ConnectionRecord};
use toolserver_store::webhook_deliveries::{self, NewDelivery};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::client::Provider;
use super::sealed::{token_name, SealedGrant};
use super::token::{lapses_within, usable};
use super::{ConnectionError, Connections};

/// What one refresh sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshSweep {
    /// Connections refreshed.
    pub refreshed: u64,
    /// Connections whose refresh the provider refused (now failed).
    pub failed: u64,
}

impl Connections {
    /// Refreshes `user`'s connection to `provider` when its access token
    /// lapses within `ahead` (it may just have been refreshed elsewhere);
    /// the connection as it now stands.
    pub async fn refresh(
        &self,
        account: &AccountId,
        (provider, user): (&str, &str),
        ahead: Duration,
    ) -> Result<ConnectionRecord, ConnectionError> {
        let configured = self.provider(account, provider, None).await?;
        let mut tx = self.pool.begin().await.map_err(StoreError::from)?;
        let connection = oauth_connections::lock(&mut tx, account, provider, user).await?;
        usable(&connection)?;
        if !lapses_within(&connection, ahead) {
            return Ok(connection);
        }
        let Some(sealed) = &connection.refresh_sealed else {
            return Ok(connection);
        };
        let refresh = self
            .sealer
            .open_account_secret(sealed, account, &token_name(provider, user, "refresh"))
            .map_err(|_| ConnectionError::Sealing)?;
        match self.exchange_refresh(&configured, refresh).await {
            Ok(granted) => {
                let sealed = SealedGrant::seal(&self.sealer, account, (provider, user), granted)?;
                let refreshed = oauth_connections::record_refreshed(
                    &mut tx,
                    account,
                    provider,
                    user,
                    &sealed.tokens(),
                )
                .await?;
                tx.commit().await.map_err(StoreError::from)?;
                Ok(refreshed)
            }
            Err(ConnectionError::Refused(error)) => {
                oauth_connections::record_failed(&mut tx, account, provider, user, &error).await?;
                announce_failure(&mut tx, account, &configured, user, &error).await?;
                tx.commit().await.map_err(StoreError::from)?;
                tracing::info!(provider, %error, "a connection's refresh was refused; it is failed");
                Err(ConnectionError::Failed {
                    provider: provider.to_owned(),
                    error,
                })
            }
            Err(other) => Err(other),
        }
    }

    /// Refreshes up to `limit` connections whose access tokens lapse
    /// within `ahead`.
    pub async fn refresh_due(
        &self,
        ahead: Duration,
        limit: i64,
    ) -> Result<RefreshSweep, StoreError> {
        let mut sweep = RefreshSweep::default();
        for (account, provider, user) in
            oauth_connections::due_for_refresh(&self.pool, ahead.as_secs_f64(), limit).await?
        {
            let Ok(account) = AccountId::parse(&account) else {
                continue;
            };
            match self.refresh(&account, (&provider, &user), ahead).await {
                Ok(_) => sweep.refreshed += 1,
                Err(ConnectionError::Failed { .. }) => sweep.failed += 1,
                Err(ConnectionError::Store(err)) => return Err(err),
                Err(err) => {
                    tracing::warn!(provider, error = %err, "a connection could not be refreshed; trying again later");
                }
            }
        }
        Ok(sweep)
    }
}

/// Queues the announcement of a refused refresh on the provider's webhook,
/// when it has one. Deliveries of one connection are kept in order under
/// the key `connection:<provider>:<user>`.
async fn announce_failure(
    conn: &mut sqlx::PgConnection,
    account: &AccountId,
    provider: &Provider,
    user: &str,
    error: &str,
) -> Result<(), StoreError> {
    let Some(url) = &provider.record.webhook else {
        return Ok(());
    };
    let name = &provider.record.name;
    let delivery = NewDelivery {
        id: Uuid::now_v7(),
        kind: "connection",
        url: url.clone(),
        body: json!({
            "type": "connection.refresh_failed",
            "connection": {
                "provider": name,
                "user": (!user.is_empty()).then_some(user),
                "status": "failed",
                "error": error,
                "failedAt": OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default(),
            },
        }),
    };
    webhook_deliveries::insert(
        conn,
        account,
        &format!("connection:{name}:{user}"),
        &delivery,
    )
    .await
}
