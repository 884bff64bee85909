//! A conversation's running turn, from any connection and any server
//! process: `GET /agents/{agentId}/chat/{conversationId}/stream` replays its
//! recorded chunks and follows it live (what `useChat({ resume: true })`
//! asks for), waiting a while for the next run of a detached turn that is
//! between runs, and `POST /agents/{agentId}/chat/{conversationId}/stop` ends
//! it wherever it runs.

use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use toolserver_domain::{AccountId, ConversationId};
use toolserver_harness::stream::follow_held;
use toolserver_store::{agents, conversations, StoreError};
use utoipa::{IntoParams, ToSchema};

use super::ui_stream::ui_message_stream;
use super::{agent_not_found, parse_agent_id};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiQuery;
use crate::state::AppState;

/// The response header naming the index of the last chunk recorded when the
/// response began (-1: none yet), as `WorkflowChatTransport` reads it.
pub const TAIL_INDEX_HEADER: &str = "x-workflow-stream-tail-index";

/// Where a resume starts.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeParams {
    /// The index of the first chunk to send (0 is the turn's `start`);
    /// negative counts back from the end (-1: the last chunk recorded).
    /// Without it, the whole turn is replayed. Any 64-bit integer: an index
    /// past the last chunk waits for it, and the stream ends with the turn.
    pub start_index: Option<i64>,
}

/// What a stop request did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopAnswer {
    /// Always `"stopping"`: the turn ends shortly, its stream with `abort`.
    pub status: String,
    /// The stopped turn's stream.
    pub stream_id: String,
}

/// Replays the conversation's running turn and follows it.
#[utoipa::path(get, path = "/agents/{agentId}/chat/{conversationId}/stream", tag = "agents",
    security(("bearer" = [])),
    params(
        ("agentId" = String, Path, description = "Agent id"),
        ("conversationId" = String, Path, description = "Conversation id (the chat id)"),
        ResumeParams,
    ),
    responses(
        (status = 200, description = "The running turn as an AI SDK UI message stream (v1), from `startIndex` (default: its `start` chunk), live until it ends; header `x-workflow-stream-tail-index` names the last chunk recorded when the response began",
            content_type = "text/event-stream", body = String,
            headers(("x-workflow-stream-tail-index" = i64, description = "Index of the last chunk recorded when the response began; -1 when none"))),
        (status = 204, description = "No turn is running in this conversation (or there is no such conversation yet); for a detached turn between runs, after waiting up to `TOOLSERVER_STREAM_RESUME_HOLD_MS` for its next run"),
        (status = 400, description = "Malformed conversation id, or a startIndex that is not a 64-bit integer", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account, or the conversation belongs to another agent", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id, conversation.id = %conversation_id))]
pub async fn resume_stream(
    Account(account): Account,
    State(state): State<AppState>,
    Path((agent_id, conversation_id)): Path<(String, String)>,
    ApiQuery(params): ApiQuery<ResumeParams>,
) -> ApiResult<Response> {
    let field = "conversationId";
    let Some(conversation) =
        conversation_of_agent(&state, &account, &agent_id, field, &conversation_id).await?
    else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let streams = state.lifecycle().streams();
    let deadline = Instant::now() + streams.settings().resume_hold;
    let held = follow_held(
        streams,
        &account,
        conversation.as_str(),
        params.start_index,
        Some(deadline),
    );
    let Some(followed) = held.await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let keep_alive = state.harness().settings().keep_alive;
    let mut response = ui_message_stream(followed.chunks, keep_alive);
    response.headers_mut().insert(
        HeaderName::from_static(TAIL_INDEX_HEADER),
        HeaderValue::from(followed.tail_index),
    );
    Ok(response)
}

/// Stops the conversation's running turn, wherever it runs.
#[utoipa::path(post, path = "/agents/{agentId}/chat/{conversationId}/stop", tag = "agents",
    security(("bearer" = [])),
    params(
        ("agentId" = String, Path, description = "Agent id"),
        ("conversationId" = String, Path, description = "Conversation id (the chat id)"),
    ),
    responses(
        (status = 202, description = "The running turn was asked to stop: its model stream and tool calls end, its stream ends with `abort`, and the conversation is freed", body = StopAnswer),
        (status = 204, description = "No turn is running in this conversation"),
        (status = 400, description = "Malformed conversation id", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account, or the conversation belongs to another agent", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id, conversation.id = %conversation_id))]
pub async fn stop_turn(
    Account(account): Account,
    State(state): State<AppState>,
    Path((agent_id, conversation_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let field = "conversationId";
    let Some(conversation) =
        conversation_of_agent(&state, &account, &agent_id, field, &conversation_id).await?
    else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let stopped = state
        .lifecycle()
        .stop_turn(&account, conversation.as_str())
        .await?;
    Ok(match stopped {
        Some(stream_id) => {
            tracing::info!(stream.id = %stream_id, "stop requested");
            let answer = StopAnswer {
                status: "stopping".into(),
                stream_id: stream_id.to_string(),
            };
            (StatusCode::ACCEPTED, Json(answer)).into_response()
        }
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `account`'s conversation `conversation_id` (named `field` in the
/// request) when it exists and talks to the agent `agent_id` (`None`: no
/// such conversation yet); 404 for an unknown agent or a conversation of
/// another agent.
pub(super) async fn conversation_of_agent(
    state: &AppState,
    account: &AccountId,
    agent_id: &str,
    field: &str,
    conversation_id: &str,
) -> Result<Option<ConversationId>, ApiError> {
    let agent_id = parse_agent_id(agent_id)?;
    let conversation = ConversationId::parse(field, conversation_id)?;
    agents::get(state.pool(), account, agent_id)
        .await
        .map_err(agent_not_found)?;
    match conversations::agent_of(state.pool(), account, conversation.as_str()).await {
        Ok(owner) if owner == agent_id => Ok(Some(conversation)),
        Ok(_) => Err(ApiError::NotFound("conversation")),
        Err(StoreError::NotFound) => Ok(None),
        Err(err) => Err(err.into()),
    }
}
