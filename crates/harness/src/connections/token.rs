//! A connection's access token at call time, refreshed first when it is
//! about to lapse.

use std::time::Duration;

use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::oauth_connections::{self, ConnectionRecord};
use toolserver_store::StoreError;

use super::sealed::token_name;
use super::{ConnectionError, Connections, ACCOUNT_USER};

/// A token closer than this to its expiry is refreshed before a call uses
/// it, so it does not lapse in flight.
pub(super) const CALL_MARGIN: Duration = Duration::from_secs(30);

impl Connections {
    /// `user`'s access token for `provider` (refreshed first when it
    /// lapses within [`CALL_MARGIN`]).
    pub async fn access_token(
        &self,
        account: &AccountId,
        user: &str,
        provider: &str,
    ) -> Result<String, ConnectionError> {
        let connection = oauth_connections::get(&self.pool, account, provider, user)
            .await
            .map_err(|err| match err {
                StoreError::NotFound => ConnectionError::NotConnected {
                    provider: provider.to_owned(),
                    user: who(user),
                },
                other => ConnectionError::Store(other),
            })?;
        let connection = match usable(&connection)? {
            true if lapses_within(&connection, CALL_MARGIN) => {
                self.refresh(account, (provider, user), CALL_MARGIN).await?
            }
            _ => connection,
        };
        self.sealer
            .open_account_secret(
                &connection.access_sealed,
                account,
                &token_name(provider, user, "access"),
            )
            .map_err(|_| ConnectionError::Sealing)
    }
}

/// Whether `connection` is active (`Failed` when it is not).
pub(super) fn usable(connection: &ConnectionRecord) -> Result<bool, ConnectionError> {
    match connection.status.as_str() {
        "active" => Ok(true),
        _ => Err(ConnectionError::Failed {
            provider: connection.provider.clone(),
            error: connection
                .last_error
                .clone()
                .unwrap_or_else(|| "it failed".to_owned()),
        }),
    }
}

/// Whether `connection`'s access token lapses within `ahead` of now.
pub(super) fn lapses_within(connection: &ConnectionRecord, ahead: Duration) -> bool {
    connection
        .expires_at
        .is_some_and(|expires_at| expires_at <= OffsetDateTime::now_utc() + ahead)
}

/// How `user` is named in an error.
fn who(user: &str) -> String {
    match user {
        ACCOUNT_USER => "the account".to_owned(),
        user => format!("end user {user:?}"),
    }
}
