//! The names OAuth material is sealed under: each blob is bound to its
//! account and to what it is, so one cannot be opened as another.

use toolserver_domain::AccountId;

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
