//! `POST /agents/{agentId}/chat`: one agent turn, streamed as the AI SDK UI
//! message stream (protocol v1), so `useChat` works against it unmodified.
//!
//! Before the stream starts, everything that can be refused is refused with a
//! 4xx: the agent and its tools are checked again, the conversation is leased
//! (one turn at a time), approval decisions are matched against the stored
//! pending approvals, and the conversation's size is checked. The turn then
//! runs in its own task and its chunks are recorded (see
//! [`toolserver_harness::stream`]) before this response carries them, so a
//! resume elsewhere replays exactly what this client saw. The stored
//! conversation is updated and the conversation freed before the final
//! `[DONE]`, so a client that sees `[DONE]` can continue at once. Whether a
//! client leaving stops the turn is the agent's `onDisconnect`.

use axum::extract::{Path, State};
use axum::response::Response;
use tokio::sync::mpsc;
use toolserver_domain::AccountId;
use toolserver_harness::lifecycle::{AccountStatus, ConversationLease};
use toolserver_harness::stream::{self, Opens};
use toolserver_harness::turn::run_turn;
use toolserver_harness::ui::UiMessage;
use toolserver_store::turn_streams::{Append, Appended};
use tracing::Instrument;

use super::chat_request::ChatRequest;
use super::turn_request::start_turn;
use super::ui_stream::ui_message_stream;
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
        (status = 429, description = "A limit of the account is reached (`openTurns`, `turnsPerMinute`); see `Retry-After`", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id, conversation.id = tracing::field::Empty))]
pub async fn chat(
    Account(account): Account,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> ApiResult<Response> {
    let chunks = launch_turn(&state, &account, &agent_id, body).await?;
    Ok(ui_message_stream(
        chunks,
        state.harness().settings().keep_alive,
    ))
}

/// Checks and starts a turn in its own task; its chunks (JSON texts) arrive
/// on the returned channel, recorded first, until the turn has ended and its
/// conversation is stored and free. Dropping the channel is the client
/// leaving (see the agent's `onDisconnect`).
pub(crate) async fn launch_turn(
    state: &AppState,
    account: &AccountId,
    agent_id: &str,
    body: ChatRequest,
) -> ApiResult<mpsc::Receiver<String>> {
    let permit = state.admission().turn(account).await?;
    let turn = start_turn(state, account, agent_id, body).await?;
    let settings = state.harness().settings().clone();
    let history = turn.history.clone();
    let durable = AccountStatus::shared(
        state.pool().clone(),
        state.executor().clone(),
        account.clone(),
    );
    let mut plan = turn.streaming_plan(&settings, durable);
    let on_disconnect = turn.checked.config.on_disconnect;
    let (lease, provider, registry) = (turn.lease, turn.provider, turn.checked.registry);
    let (forward, client) = mpsc::channel(FORWARD_BUFFER);
    let recording = match stream::record(
        state.lifecycle().streams(),
        account,
        lease.conversation_id(),
        Some(forward.clone()),
        on_disconnect,
        Opens::WithFirstChunks(lease.holder()),
    )
    .await
    {
        Ok(recording) => recording,
        Err(err) => {
            lease.release().await;
            return Err(err.into());
        }
    };
    plan.stop = recording.stop.clone();
    let span = tracing::info_span!(
        "turn",
        agent.id = %agent_id,
        conversation.id = %lease.conversation_id(),
        stream.id = ?recording.stream_id,
    );
    let turn = async move {
        let renewal = lease.keep_renewed();
        let outcome = run_turn(provider, registry, plan, recording.chunks.clone()).await;
        renewal.abort();
        let mut messages = history;
        messages.push(outcome.assistant);
        recording
            .finish_with(|stream_end| store_and_release(lease, messages, stream_end))
            .await;
        drop(forward);
        drop(permit);
    };
    tokio::spawn(turn.instrument(span));
    Ok(client)
}

/// A turn's last write: its conversation stored and released, with its
/// stream's end when the recording gives it; how that end went.
async fn store_and_release(
    mut lease: ConversationLease,
    messages: Vec<UiMessage>,
    stream_end: Option<Append>,
) -> Option<Appended> {
    match lease
        .store_and_release(&messages, stream_end.as_ref())
        .await
    {
        Ok(ended) => {
            if !ended.stored {
                tracing::error!("could not store the conversation: the turn no longer holds it");
            }
            ended.stream_end
        }
        Err(err) => {
            tracing::error!(error = %err, "could not store the conversation");
            lease.release().await;
            None
        }
    }
}

/// Chunks buffered for this request's client.
const FORWARD_BUFFER: usize = 64;
