//! `/agents`: create, list, read, update and delete agent configs, and run
//! turns (`/agents/{agentId}/chat`). Credentials in a config are write-only:
//! they are sealed at rest and read back as `"[redacted]"`.

mod chat;
mod chat_request;
mod crud;
mod detached;
mod resume;
mod socket;
mod ui_stream;
mod wire;

use toolserver_domain::AgentId;
use toolserver_harness::tools::RegistryError;
use toolserver_store::StoreError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::state::AppState;

pub use chat_request::{ChatRequest, Trigger};
pub use resume::{ResumeParams, StopAnswer, TAIL_INDEX_HEADER};
pub use socket::{SocketParams, CHAT_PROTOCOL};
pub use wire::{AgentBody, AgentPage, AgentPatch, AgentView};

/// The agent routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(crud::create_agent, crud::list_agents))
        .routes(routes!(
            crud::get_agent,
            crud::update_agent,
            crud::delete_agent
        ))
        .routes(routes!(chat::chat))
        .routes(routes!(resume::resume_stream))
        .routes(routes!(resume::stop_turn))
        .routes(routes!(socket::chat_socket))
        .routes(routes!(detached::start_async))
        .routes(routes!(detached::get_async))
}

/// Parses an agent id from a path; a malformed id is simply not found.
fn parse_agent_id(raw: &str) -> Result<AgentId, ApiError> {
    AgentId::parse(raw).ok_or(ApiError::NotFound("agent"))
}

/// Maps "no such row" to an agent-specific 404.
fn agent_not_found(err: StoreError) -> ApiError {
    match err {
        StoreError::NotFound => ApiError::NotFound("agent"),
        other => other.into(),
    }
}

/// Registry failures: a bad config is a 422 naming the field.
fn registry_error(err: RegistryError) -> ApiError {
    match err {
        RegistryError::Invalid(invalid) => invalid.into(),
        RegistryError::Store(store) => store.into(),
    }
}
