//! The caller's account as an MCP server: `POST /mcp` speaks the
//! streamable HTTP transport (statelessly, so any server process answers any
//! request), lists the account's uploaded tools and the built-ins this
//! server runs, calls them, and keeps task-augmented calls as durable
//! detached calls. Unauthenticated requests get 401 pointing at the OAuth
//! protected-resource metadata.

mod auth;
mod handler;
mod progress;
pub mod settings;
mod task_name;
mod wire;

use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::state::AppState;

pub use auth::{McpCaller, METADATA_PATH};
pub use handler::LIMIT_EXCEEDED;
pub use settings::McpSettings;

/// Where the MCP endpoint is served. It and the metadata routes are
/// described in `contract.yaml` (the SDK's service carries no annotation).
pub const MCP_PATH: &str = "/mcp";

/// `/mcp` and the OAuth protected-resource metadata routes.
pub fn routes(state: AppState) -> Router {
    let settings = state.settings().mcp.clone();
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(state.settings().max_request_bytes);
    config = match settings.allowed_hosts.is_empty() {
        true => config.disable_allowed_hosts(),
        false => config.with_allowed_hosts(settings.allowed_hosts.clone()),
    };
    let server = handler::AccountServer::new(state.clone());
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            task_name::name_tasks,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .merge(
            Router::new()
                .route(METADATA_PATH, get(auth::origin_metadata))
                .route(
                    &format!("{METADATA_PATH}{MCP_PATH}"),
                    get(auth::endpoint_metadata),
                )
                .with_state(state),
        )
}
