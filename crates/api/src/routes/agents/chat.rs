//! `POST /agents/{agentId}/chat`: one agent turn, streamed as the AI SDK UI
//! message stream (protocol v1), so `useChat` works against it unmodified.
//!
//! Before the stream starts, everything that can be refused is refused with a
//! 4xx (the account's limits here, then the submission's checks: see
//! [`toolserver_harness::submission`]). The turn's chunks are recorded
//! before this response carries them, and the conversation is stored and
//! freed before the final `[DONE]`, so a client that sees `[DONE]` can
//! continue at once.

use axum::extract::{Path, State};
use axum::response::Response;
use tokio::sync::mpsc;
use toolserver_domain::AccountId;
use toolserver_harness::submission::Submission;

use super::chat_request::ChatRequest;
use super::ui_stream::ui_message_stream;
use crate::auth::{Account, EndUser};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Runs one turn of an agent.
#[utoipa::path(post, path = "/agents/{agentId}/chat", tag = "agents",
    security(("bearer" = [])),
    params(("agentId" = String, Path, description = "Agent id")),
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The turn as an AI SDK UI message stream (v1): `data: <chunk>` frames ending with `data: [DONE]`",
            content_type = "text/event-stream", body = String),
        (status = 400, description = "Malformed body or message", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account", body = ErrorBody),
        (status = 409, description = "The conversation is busy, belongs to another agent, or the approval answers no pending approval", body = ErrorBody),
        (status = 413, description = "The conversation is too large", body = ErrorBody),
        (status = 422, description = "The agent's config is no longer valid (e.g. a tool was deleted), or the request does not fit the conversation", body = ErrorBody),
        (status = 429, description = "A limit of the account is reached (`openTurns`, `turnsPerMinute`); see `Retry-After`", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id, conversation.id = tracing::field::Empty))]
pub async fn chat(
    Account(account): Account,
    EndUser(user): EndUser,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> ApiResult<Response> {
    let chunks = stream_turn(&state, (&account, user), &agent_id, body).await?;
    Ok(ui_message_stream(
        chunks,
        state.harness().settings().keep_alive,
    ))
}

/// Checks and starts a streamed turn in its own task, holding the
/// account's place among its open turns until it ends; its chunks (JSON
/// texts) arrive on the returned channel (see
/// [`toolserver_harness::Lifecycle::submit_streamed`]).
pub(crate) async fn stream_turn(
    state: &AppState,
    (account, user): (&AccountId, Option<String>),
    agent_id: &str,
    body: ChatRequest,
) -> ApiResult<mpsc::Receiver<String>> {
    let permit = state.admission().turn(account).await?;
    let submission = Submission {
        subject: user,
        ..body.into_submission(account.clone(), agent_id)?
    };
    tracing::Span::current().record("conversation.id", submission.conversation.as_str());
    Ok(state
        .lifecycle()
        .submit_streamed(submission, Box::new(permit))
        .await?)
}
