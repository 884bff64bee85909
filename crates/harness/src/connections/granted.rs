//! What a provider's token endpoint grants.

use time::OffsetDateTime;

/// What a token endpoint granted.
pub(super) struct Granted {
    /// The access token.
    pub access: String,
    /// The refresh token, when one was given.
    pub refresh: Option<String>,
    /// When the access token lapses, when the provider says.
    pub expires_at: Option<OffsetDateTime>,
    /// The scopes granted, when the provider says.
    pub scopes: Vec<String>,
}
