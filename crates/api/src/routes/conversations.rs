//! `GET /conversations/{conversationId}`: a conversation's stored UI
//! messages, whether it is with people and what became of its channel
//! answers; `POST
//! /conversations/{conversationId}/release`: a person hands it back to its
//! agent.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use toolserver_harness::channels::CHANNEL_REPLY;
use toolserver_harness::ui::UiMessage;
use toolserver_store::webhook_deliveries::{self, DeliveryState};
use toolserver_store::{conversations, handoffs, StoreError};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// How many of a conversation's channel answers its read shows.
const CHANNEL_REPLIES_SHOWN: i64 = 20;

/// The conversation routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_conversation))
        .routes(routes!(release_conversation))
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
    /// Set while the conversation is with people (the agent's `handoff`
    /// tool handed it off); its turns are answered with the agent's held
    /// message until it is released.
    pub handoff: Option<HandoffView>,
    /// The answers posted back into the chat channel the conversation came
    /// through, newest first (at most 20): each `pending` while it is
    /// tried, then `delivered` or `failed` with its last error. Empty for a
    /// conversation that no channel started.
    pub channel_replies: Vec<DeliveryView>,
}

/// A conversation's handoff to people.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffView {
    /// Why the agent handed off.
    pub reason: String,
    /// What the agent told the people taking over.
    pub summary: Option<String>,
    /// When (RFC 3339).
    pub at: String,
    /// The tool call that handed off.
    pub tool_call_id: String,
    /// The announcement to the agent's webhook, when it names one.
    pub announcement: Option<DeliveryView>,
}

/// What became of a post the server must deliver (a handoff's
/// announcement, a channel's answer).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// Its id, sent as `Idempotency-Key` and `deliveryId`.
    pub delivery_id: String,
    /// `pending` (being tried), `delivered` or `failed` (out of attempts).
    pub status: String,
    /// Attempts so far.
    pub attempts: i32,
    /// What went wrong the last time, if anything.
    pub last_error: Option<String>,
}

/// The answer to a release.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseView {
    /// The conversation.
    pub conversation_id: String,
    /// Whether it was with people (false: it was with its agent already).
    pub released: bool,
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
        .map_err(not_found)?;
    let handoff = match &record.handoff {
        Some(handoff) => {
            let announcement = webhook_deliveries::latest(
                state.pool(),
                &account,
                &conversation_id,
                handoffs::ANNOUNCEMENT,
            )
            .await?;
            Some(handoff_view(handoff, announcement))
        }
        None => None,
    };
    let channel_replies = webhook_deliveries::recent(
        state.pool(),
        &account,
        &conversation_id,
        CHANNEL_REPLY,
        CHANNEL_REPLIES_SHOWN,
    )
    .await?
    .into_iter()
    .map(delivery_view)
    .collect();
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
        handoff,
        channel_replies,
    }))
}

/// Hands one of the caller's conversations back to its agent: its next
/// turn asks the model again.
#[utoipa::path(post, path = "/conversations/{conversationId}/release", tag = "agents",
    security(("bearer" = [])),
    params(("conversationId" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The conversation is with its agent", body = ReleaseView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such conversation in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn release_conversation(
    Account(account): Account,
    State(state): State<AppState>,
    Path(conversation_id): Path<String>,
) -> ApiResult<Json<ReleaseView>> {
    let released = handoffs::release(state.pool(), &account, &conversation_id)
        .await
        .map_err(not_found)?;
    Ok(Json(ReleaseView {
        conversation_id,
        released: released.is_some(),
    }))
}

fn not_found(err: StoreError) -> ApiError {
    match err {
        StoreError::NotFound => ApiError::NotFound("conversation"),
        other => other.into(),
    }
}

/// The stored `handoff` and its latest announcement, as shown.
fn handoff_view(handoff: &Value, announcement: Option<DeliveryState>) -> HandoffView {
    let text = |field: &str| {
        handoff
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    HandoffView {
        reason: text("reason").unwrap_or_default(),
        summary: text("summary"),
        at: text("at").unwrap_or_default(),
        tool_call_id: text("toolCallId").unwrap_or_default(),
        announcement: announcement.map(delivery_view),
    }
}

/// A delivery's state, as shown.
fn delivery_view(state: DeliveryState) -> DeliveryView {
    DeliveryView {
        delivery_id: state.id.to_string(),
        status: match (state.delivered_at, state.failed_at) {
            (Some(_), _) => "delivered",
            (None, Some(_)) => "failed",
            (None, None) => "pending",
        }
        .to_owned(),
        attempts: state.attempts,
        last_error: state.last_error,
    }
}
