//! `POST /agents/{agentId}/chat`: one agent turn, streamed as the AI SDK UI
//! message stream (protocol v1), so `useChat` works against it unmodified.
//!
//! Before the stream starts, everything that can be refused is refused with a
//! 4xx: the agent and its tools are checked again, the conversation is leased
//! (one turn at a time), approval decisions are matched against the stored
//! pending approvals, and the conversation's size is checked. The turn then
//! runs in its own task; the stored conversation is updated before the final
//! `[DONE]`, so a client that sees `[DONE]` can continue at once.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream, StreamExt};
use tokio::sync::mpsc;
use toolserver_harness::lifecycle::AccountStatus;
use toolserver_harness::turn::run_turn;
use toolserver_harness::ui::UiChunk;

use super::chat_request::ChatRequest;
use super::turn_request::start_turn;
use crate::auth::Account;
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
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id, conversation.id = tracing::field::Empty))]
pub async fn chat(
    Account(account): Account,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> ApiResult<Response> {
    let turn = start_turn(&state, &account, &agent_id, body).await?;
    let settings = state.harness().settings().clone();
    let history = turn.history.clone();
    let durable = AccountStatus::shared(
        state.pool().clone(),
        state.executor().clone(),
        account.clone(),
    );
    let plan = turn.streaming_plan(&settings, durable);
    let (lease, provider, registry) = (turn.lease, turn.provider, turn.checked.registry);
    let (chunks, receiver) = mpsc::channel(64);
    tokio::spawn(async move {
        let renewal = lease.keep_renewed();
        let outcome = run_turn(provider, registry, plan, chunks.clone()).await;
        renewal.abort();
        if let Some(error) = &outcome.error {
            tracing::info!(error = %error, "turn ended with an error");
        }
        let mut messages = history;
        messages.push(outcome.assistant);
        if let Err(err) = lease.save(&messages).await {
            tracing::error!(error = %err, "could not store the conversation");
        }
        lease.release().await;
        drop(chunks);
    });

    let mut response = Sse::new(ui_stream(receiver))
        .keep_alive(KeepAlive::new().interval(settings.keep_alive))
        .into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        ("x-vercel-ai-ui-message-stream", "v1"),
        ("x-accel-buffering", "no"),
        ("cache-control", "no-cache"),
    ] {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    Ok(response)
}

/// `data: <chunk>` frames, then `data: [DONE]` once the turn task is done.
fn ui_stream(receiver: mpsc::Receiver<UiChunk>) -> impl Stream<Item = Result<Event, Infallible>> {
    let chunks = stream::unfold(receiver, |mut receiver| async move {
        let chunk = receiver.recv().await?;
        let event = Event::default()
            .json_data(&chunk)
            .unwrap_or_else(|_| Event::default().data("{}"));
        Some((Ok(event), receiver))
    });
    chunks.chain(stream::once(async { Ok(Event::default().data("[DONE]")) }))
}
