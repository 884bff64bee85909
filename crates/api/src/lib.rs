//! The HTTP API of toolserver: one router per resource, a single error type,
//! a bearer-token extractor, and the OpenAPI document generated from the
//! same route definitions.

pub mod auth;
pub mod error;
pub mod extract;
pub mod layers;
pub mod nats;
pub mod openapi;
pub mod routes;
pub mod server;
pub mod state;

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

pub use state::{ApiSettings, AppState};

fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(routes::health::routes())
        .merge(routes::tools::routes())
        .merge(routes::bundles::routes())
        .merge(routes::agents::routes())
        .merge(routes::conversations::routes())
        .merge(routes::sandbox_jobs::routes())
}

/// The complete application: every route with the standard layers applied.
pub fn app(state: AppState) -> Router {
    let settings = state.settings().clone();
    let (router, _) = api_router().split_for_parts();
    layers::apply(
        router.with_state(state),
        settings.request_timeout,
        settings.max_request_bytes,
    )
}

/// The OpenAPI document describing [`app`].
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}
