//! The names OAuth material is sealed under: each blob is bound to its
//! account and to what it is, so one cannot be opened as another.

use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::oauth_connections::Tokens;

use super::granted::Granted;
use super::ConnectionError;
use crate::sealing::SecretBox;

/// Seals `provider`'s client secret for `account`.
pub fn seal_client_secret(
    sealer: &SecretBox,
    account: &AccountId,
    provider: &str,
    secret: &str,
) -> Option<Vec<u8>> {
    sealer.seal_account_secret(secret, account, &client_secret_name(provider))
}

/// What a provider's client secret is sealed as.
pub(super) fn client_secret_name(provider: &str) -> String {
    format!("oauth-provider:{provider}")
}

/// What a connection's access (`which` = `access`) or refresh token is
/// sealed as.
pub(super) fn token_name(provider: &str, user: &str, which: &str) -> String {
    format!("oauth-connection:{provider}:{user}:{which}")
}

/// What an authorization's PKCE verifier is sealed as.
pub(super) fn verifier_name(authorization: &str) -> String {
    format!("oauth-authorization:{authorization}")
}

/// A token endpoint's grant, sealed for one connection.
pub(super) struct SealedGrant {
    access: Vec<u8>,
    refresh: Option<Vec<u8>>,
    expires_at: Option<OffsetDateTime>,
    scopes: Vec<String>,
}

impl SealedGrant {
    /// Seals `granted` for `account`'s connection of `user` to `provider`.
    pub(super) fn seal(
        sealer: &SecretBox,
        account: &AccountId,
        (provider, user): (&str, &str),
        granted: Granted,
    ) -> Result<Self, ConnectionError> {
        let seal = |value: &str, which: &str| {
            sealer
                .seal_account_secret(value, account, &token_name(provider, user, which))
                .ok_or(ConnectionError::Sealing)
        };
        Ok(Self {
            access: seal(&granted.access, "access")?,
            refresh: granted
                .refresh
                .as_deref()
                .map(|refresh| seal(refresh, "refresh"))
                .transpose()?,
            expires_at: granted.expires_at,
            scopes: granted.scopes,
        })
    }

    /// The tokens as the store keeps them.
    pub(super) fn tokens(&self) -> Tokens<'_> {
        Tokens {
            access_sealed: &self.access,
            refresh_sealed: self.refresh.as_deref(),
            expires_at: self.expires_at,
            scopes: &self.scopes,
        }
    }
}
