//! Per-user OAuth connections: the account's OAuth providers
//! (`/accounts/me/oauth-providers`), its end users' connections
//! (`/accounts/me/connections`), starting an authorization outside a turn,
//! and the redirect back from a provider (`GET /oauth/callback`), which
//! stores the connection and resumes the call that waited on it.

mod callback;
mod page;
mod providers;
mod users;
mod wire;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub use wire::{
    AuthorizationView, AuthorizeBody, CallbackView, ConnectionList, ConnectionView, ProviderBody,
    ProviderList, ProviderView,
};

/// The connection routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(providers::list_providers))
        .routes(routes!(providers::put_provider, providers::delete_provider))
        .routes(routes!(users::list_connections))
        .routes(routes!(users::delete_connection))
        .routes(routes!(users::authorize))
        .routes(routes!(callback::oauth_callback))
}
