//! `POST /channels/{agentId}/{channel}`: where a chat platform delivers an
//! agent's channel events. No bearer token: each request proves itself
//! with the channel's secret (Slack's signature, Telegram's secret token,
//! the webhook channel's signature), checked over the exact body before
//! anything is recorded; a refused request is 401 and runs nothing. A
//! message is recorded once by the platform's event id and acknowledged at
//! once (Slack wants an answer within 3 s); its turn runs detached and its
//! answers are posted back into the thread. A retried event is answered
//! 200 and runs nothing new.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{json, Value};
use time::OffsetDateTime;
use toolserver_domain::agent::channels::valid_channel_name;
use toolserver_domain::conversation::MAX_CONVERSATION_ID_CHARS;
use toolserver_domain::AgentId;
use toolserver_harness::channels::{
    self, channel_setting, ChannelLookupError, Inbound, InboundError, Received,
};
use toolserver_store::channel_events::{self, NewChannelEvent};
use toolserver_store::{agents, StoreError};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::channels::{start_event, user_message, CLAIM};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// The channel routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(receive_event))
}

/// Receives one event from a chat platform.
#[utoipa::path(post, path = "/channels/{agentId}/{channel}", tag = "channels",
    params(
        ("agentId" = String, Path, description = "The agent whose channel this is"),
        ("channel" = String, Path, description = "The channel's name in the agent's config"),
    ),
    request_body(content = Object, description = "The platform's event, as it sends it: a Slack Events API callback, a Telegram update, or a webhook channel's `{id, thread, text}`"),
    responses(
        (status = 200, description = "Taken: recorded (or recorded before), ignored, or a platform's URL check answered", body = Object),
        (status = 400, description = "The body is not what the platform sends", body = ErrorBody),
        (status = 401, description = "The signature, secret token or timestamp does not check out; nothing was recorded", body = ErrorBody),
        (status = 404, description = "No such agent or channel", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id, channel = %channel))]
pub async fn receive_event(
    State(state): State<AppState>,
    Path((agent_id, channel)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let not_found = || ApiError::NotFound("channel");
    let agent = AgentId::parse(&agent_id).ok_or_else(not_found)?;
    if !valid_channel_name(&channel) {
        return Err(not_found());
    }
    let pool = state.pool();
    let account = agents::owner(pool, agent).await.map_err(|err| match err {
        StoreError::NotFound => not_found(),
        other => other.into(),
    })?;
    let setting = channel_setting(state.harness(), pool, &account, agent, &channel)
        .await
        .map_err(|err| match err {
            ChannelLookupError::NotFound => not_found(),
            ChannelLookupError::Unreadable(cause) => ApiError::Internal(cause),
            ChannelLookupError::Store(store) => store.into(),
        })?;
    let settings = state.harness().settings().webhooks;
    let request = Received {
        headers: &headers,
        body: &body,
        now: OffsetDateTime::now_utc().unix_timestamp(),
        window: settings.signature_window,
    };
    let message = match channels::receive(&setting, request) {
        Err(InboundError::Unauthorized(message)) => return Err(ApiError::Unauthorized(message)),
        Err(InboundError::Malformed(message)) => {
            return Err(ApiError::BadRequest {
                field: None,
                message,
            })
        }
        Ok(Inbound::Challenge(answer)) => return Ok(Json(answer)),
        Ok(Inbound::Ignored(reason)) => return Ok(Json(json!({"ok": true, "ignored": reason}))),
        Ok(Inbound::Message(message)) => message,
    };
    let conversation = channels::conversation_id(agent, &channel, &message.thread);
    if conversation.chars().count() > MAX_CONVERSATION_ID_CHARS {
        return Err(ApiError::BadRequest {
            field: None,
            message: "the platform's thread id is too long to name a conversation".to_owned(),
        });
    }
    let id = Uuid::now_v7();
    let user = user_message(id, &message.text, &channel);
    let event = NewChannelEvent {
        id,
        account: &account,
        agent,
        channel: &channel,
        event_key: &message.event_key,
        conversation_id: &conversation,
        message: &user,
        reply_to: &message.reply_to,
    };
    let Some(recorded) = channel_events::record(pool, &event, CLAIM).await? else {
        return Ok(Json(json!({"ok": true, "duplicate": true})));
    };
    let starter = state.clone();
    state
        .lifecycle()
        .spawn_loop(async move { start_event(&starter, recorded).await });
    Ok(Json(json!({"ok": true, "eventId": id})))
}
