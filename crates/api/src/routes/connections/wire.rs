//! The JSON of the connection routes.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use toolserver_store::oauth_connections::ConnectionRecord;
use toolserver_store::oauth_providers::OAuthProviderRecord;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// An OAuth provider as configured.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderBody {
    /// The provider's authorization endpoint (http or https).
    pub authorization_url: String,
    /// The provider's token endpoint (http or https, a public address).
    pub token_url: String,
    /// This account's client id at the provider.
    pub client_id: String,
    /// Its client secret, sealed at once and never shown (absent: a public
    /// client). Left out on an update, the stored one is kept.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// The scopes asked for.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Where failed refreshes are announced (`connection.refresh_failed`).
    #[serde(default)]
    pub webhook: Option<String>,
}

/// An OAuth provider as shown: never its client secret.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderView {
    /// The name templates use (`{{connection.NAME.access_token}}`).
    pub name: String,
    /// The authorization endpoint.
    pub authorization_url: String,
    /// The token endpoint.
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// Whether a client secret is kept.
    pub has_client_secret: bool,
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// Where failed refreshes are announced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// When it was created (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// When it last changed (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

impl From<OAuthProviderRecord> for ProviderView {
    fn from(record: OAuthProviderRecord) -> Self {
        Self {
            name: record.name,
            authorization_url: record.authorization_url,
            token_url: record.token_url,
            client_id: record.client_id,
            has_client_secret: record.client_secret_sealed.is_some(),
            scopes: record.scopes,
            webhook: record.webhook,
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// The account's OAuth providers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderList {
    /// Every provider, by name.
    pub providers: Vec<ProviderView>,
}

/// An end user's connection: never its tokens.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionView {
    /// The provider.
    pub provider: String,
    /// The end user (absent: the account itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `active`, or `failed` (it must be authorized again).
    pub status: String,
    /// When the access token lapses, when the provider said (RFC 3339).
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<OffsetDateTime>,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it was last refreshed (RFC 3339).
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub refreshed_at: Option<OffsetDateTime>,
    /// When it was first made (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// When it last changed (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

impl From<ConnectionRecord> for ConnectionView {
    fn from(record: ConnectionRecord) -> Self {
        Self {
            provider: record.provider,
            user: (!record.user_id.is_empty()).then_some(record.user_id),
            status: record.status,
            expires_at: record.expires_at,
            scopes: record.scopes,
            last_error: record.last_error,
            refreshed_at: record.refreshed_at,
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// Connections.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConnectionList {
    /// Every connection asked for, by provider and user.
    pub connections: Vec<ConnectionView>,
}

/// Whose connections: an end user's (a token that names one acts for it
/// alone).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UserQuery {
    /// The end user (absent: every user when listing, the account itself
    /// otherwise).
    pub user: Option<String>,
}

/// Whom an authorization outside a turn is for.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthorizeBody {
    /// The end user (absent: the token's end user, else the account).
    #[serde(default)]
    pub user: Option<String>,
}

/// An authorization started: send the end user to `url`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationView {
    /// Its id.
    pub authorization_id: String,
    /// Where the end user grants access.
    pub url: String,
    /// When it lapses unused (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
}

/// The provider's redirect, as sent.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    /// The state the authorization URL carried.
    pub state: Option<String>,
    /// The authorization code, when access was granted.
    pub code: Option<String>,
    /// The provider's error code, when it was not.
    pub error: Option<String>,
    /// The provider's words on it.
    pub error_description: Option<String>,
}

/// A connection made by a redirect.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackView {
    /// Always true.
    pub connected: bool,
    /// The provider.
    pub provider: String,
    /// The end user (absent: the account).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The detached turn that runs the call which waited, when one did and
    /// it resumed now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_turn: Option<Uuid>,
}
