//! Turns requested over NATS. A request on the configured subject (served
//! by a queue group, so one server takes each) is
//! `{"token": "<JWT>", "agentId": "agent_…", "request": <the useChat body>}`
//! with a reply subject. The requester, still subscribed to that subject,
//! hears `{"statusId", "status": "running"}` (or `{"error": {code, message}}`)
//! at once, and the final `{"statusId", "status", "messages" | "error"}`
//! when the detached turn settles, from whichever process settles it.

pub mod replies;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use toolserver_domain::TurnStatus;
use toolserver_harness::lifecycle::DetachedReply;
use uuid::Uuid;

use crate::error::ApiError;
use crate::routes::agents::ChatRequest;
use crate::state::AppState;
use replies::publish;
pub use replies::NatsReplies;

/// A turn request as it arrives over NATS.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NatsTurnRequest {
    token: String,
    agent_id: String,
    request: ChatRequest,
}

/// Serves turn requests on `subject` until the connection closes or the
/// server shuts down (the loop runs on the lifecycle's task tracker).
pub async fn spawn_turns(
    state: AppState,
    client: async_nats::Client,
    subject: String,
) -> Result<tokio::task::JoinHandle<()>, async_nats::SubscribeError> {
    let queue = format!("{subject}.servers");
    let mut requests = client.queue_subscribe(subject, queue).await?;
    let lifecycle = state.lifecycle().clone();
    Ok(lifecycle.spawn_loop(async move {
        while let Some(message) = requests.next().await {
            let (state, client) = (state.clone(), client.clone());
            tokio::spawn(async move {
                let Some(reply) = message.reply else { return };
                let answer = match start(&state, &message.payload, reply.as_str()).await {
                    Ok(status_id) => json!({"statusId": status_id, "status": TurnStatus::Running}),
                    Err(ApiError::TooManyRequests(refusal)) => json!({"error": {
                        "code": "limit_exceeded",
                        "message": refusal.to_string(),
                        "limit": refusal.kind.name(),
                        "value": refusal.value,
                        "retryAfterMs": refusal.retry_after.as_millis() as u64,
                    }}),
                    Err(err) => json!({"error": {"code": err.code(), "message": err.to_string()}}),
                };
                publish(&client, reply.to_string(), &answer).await;
            });
        }
    }))
}

async fn start(state: &AppState, payload: &[u8], reply: &str) -> Result<Uuid, ApiError> {
    let request: NatsTurnRequest =
        serde_json::from_slice(payload).map_err(|err| ApiError::BadRequest {
            field: None,
            message: format!("not a turn request: {err}"),
        })?;
    let account = state.auth().authenticate(&request.token).await?;
    state.admission().detached_turn(&account).await?;
    let submission = request
        .request
        .into_submission(account, &request.agent_id)?;
    Ok(state
        .lifecycle()
        .submit_detached(submission, DetachedReply::Nats(reply.to_owned()))
        .await?)
}
