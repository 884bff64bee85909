//! The HTTP API of toolserver: one router per resource, a single error type,
//! a bearer-token extractor, and the OpenAPI document generated from the
//! same route definitions.

pub mod admission;
pub mod auth;
pub mod channels;
pub mod cors;
pub mod edge;
pub mod error;
pub mod extract;
pub mod layers;
pub mod mcp;
pub mod metrics;
pub mod nats;
pub mod openapi;
pub mod routes;
pub mod server;
pub mod sorted;
pub mod state;
pub mod tool_cache;
pub mod unread_body;
pub mod usage;

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
        .merge(routes::operator::routes())
        .merge(routes::accounts::routes())
        .merge(routes::secrets::routes())
        .merge(routes::connections::routes())
        .merge(routes::runner_fetch::routes())
        .merge(routes::channels::routes())
        .merge(routes::tool_calls::routes())
        .merge(routes::policies::routes())
        .merge(routes::approvals::routes())
}

/// The complete application: every route with the standard layers applied.
pub fn app(state: AppState) -> Router {
    let settings = state.settings().clone();
    let (router, _) = api_router().split_for_parts();
    let mcp = mcp::routes(state.clone());
    layers::apply(
        router.with_state(state).merge(mcp),
        layers::EdgeLimits {
            request_timeout: settings.request_timeout,
            max_body_bytes: settings.max_request_bytes,
            max_uri_bytes: settings.max_uri_bytes,
        },
        settings.cors.as_ref(),
    )
}

/// The OpenAPI document the routes generate (paths, operations, statuses).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}

/// The published contract: [`openapi`] with every input rule laid over it.
pub fn contract() -> anyhow::Result<serde_json::Value> {
    let generated = serde_json::to_value(openapi())?;
    Ok(openapi::apply_contract(generated)?)
}

/// [`contract`] as YAML, as `openapi.yaml` holds it: every object's keys
/// sorted, whichever order `serde_json`'s maps keep.
pub fn contract_yaml() -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(&sorted::sorted_keys(contract()?))?)
}
