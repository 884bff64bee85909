//! `GET /conversations/{conversationId}`: a conversation's stored UI
//! messages.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use toolserver_harness::ui::UiMessage;
use toolserver_store::{conversations, StoreError};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// The conversation routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_conversation))
}

/// A stored conversation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversationView {
    /// The client-chosen id.
    pub id: String,
    /// The agent it talks to.
    pub agent_id: String,
    /// AI SDK `UIMessage`s in order.
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    /// Creation time (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// Last change (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

/// Reads one of the caller's conversations.
#[utoipa::path(get, path = "/conversations/{conversationId}", tag = "agents",
    security(("bearer" = [])),
    params(("conversationId" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The conversation", body = ConversationView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such conversation in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn get_conversation(
    Account(account): Account,
    State(state): State<AppState>,
    Path(conversation_id): Path<String>,
) -> ApiResult<Json<ConversationView>> {
    let record = conversations::get(state.pool(), &account, &conversation_id)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::NotFound("conversation"),
            other => other.into(),
        })?;
    Ok(Json(ConversationView {
        id: record.id,
        agent_id: record.agent_id.to_string(),
        messages: record
            .messages
            .into_iter()
            .map(UiMessage::rewrite_stored)
            .collect(),
        created_at: record.created_at,
        updated_at: record.updated_at,
    }))
}
