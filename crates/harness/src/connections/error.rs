//! Why a connection could not be used, made or refreshed.

use toolserver_store::StoreError;

/// Why a connection could not be used, made or refreshed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The account configures no such provider.
    #[error("the account has no OAuth provider {0:?} (PUT /accounts/me/oauth-providers/{0})")]
    NoProvider(String),
    /// The end user never connected the provider.
    #[error("{user} has not connected {provider}")]
    NotConnected {
        /// The provider.
        provider: String,
        /// Who ("the account" for turns with no end user).
        user: String,
    },
    /// The connection failed for good (its refresh was refused); the user
    /// must authorize again.
    #[error("the connection to {provider} failed ({error}); it must be authorized again")]
    Failed {
        /// The provider.
        provider: String,
        /// What the provider said.
        error: String,
    },
    /// No pending authorization has this state (unknown, used, or lapsed).
    #[error("no pending authorization matches this redirect: it is unknown, was used, or expired")]
    UnknownAuthorization,
    /// The provider refused (an `error` on the redirect, or from its token
    /// endpoint).
    #[error("the provider refused: {0}")]
    Refused(String),
    /// The provider could not be reached, or answered nonsense.
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    /// Sealed material did not open (the secrets key changed).
    #[error("sealed OAuth material could not be opened")]
    Sealing,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
