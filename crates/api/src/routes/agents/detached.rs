//! `POST /agents/{agentId}/async` and `GET /async/{statusId}`: a turn that
//! runs in the background. A call that needs approval stops it with a
//! recorded approval (see `docs/approvals.md`); deciding it resumes the
//! turn as another detached turn. Uploaded async tools detach and complete
//! through `POST /sandbox-jobs/{id}/complete`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use toolserver_domain::TurnStatus;
use toolserver_harness::lifecycle::DetachedReply;
use toolserver_harness::submission::Submission;
use toolserver_harness::ui::UiMessage;
use toolserver_store::{async_turns, StoreError};
use utoipa::ToSchema;
use uuid::Uuid;

use super::chat_request::ChatRequest;
use crate::auth::{Account, EndUser};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// The id to poll a detached turn with.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AsyncAccepted {
    /// Pass to `GET /async/{statusId}`.
    pub status_id: String,
}

/// A detached turn's state.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AsyncTurnView {
    /// The status id.
    pub status_id: String,
    /// `running`, `waiting` (on detached tool calls), `completed` or `failed`.
    pub status: TurnStatus,
    /// The conversation id.
    pub conversation_id: String,
    /// The conversation's messages, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub messages: Option<Value>,
    /// What went wrong, once failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Creation time (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// Last change (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

/// Starts a detached turn.
#[utoipa::path(post, path = "/agents/{agentId}/async", tag = "agents",
    security(("bearer" = [])),
    params(("agentId" = String, Path, description = "Agent id")),
    request_body = ChatRequest,
    responses(
        (status = 202, description = "The turn runs in the background", body = AsyncAccepted),
        (status = 400, description = "Malformed body or message", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account", body = ErrorBody),
        (status = 409, description = "The conversation is busy or belongs to another agent", body = ErrorBody),
        (status = 413, description = "The conversation is too large", body = ErrorBody),
        (status = 422, description = "The agent's config is no longer valid", body = ErrorBody),
        (status = 429, description = "A limit of the account is reached (`pendingDetached`, `turnsPerMinute`); see `Retry-After`", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id, conversation.id = tracing::field::Empty))]
pub async fn start_async(
    Account(account): Account,
    EndUser(user): EndUser,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> ApiResult<(StatusCode, Json<AsyncAccepted>)> {
    state.admission().detached_turn(&account).await?;
    let submission = Submission {
        subject: user,
        ..body.into_submission(account, &agent_id)?
    };
    tracing::Span::current().record("conversation.id", submission.conversation.as_str());
    let turn_id = state
        .lifecycle()
        .submit_detached(submission, DetachedReply::Poll)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(AsyncAccepted {
            status_id: turn_id.to_string(),
        }),
    ))
}

/// Reads a detached turn's state.
#[utoipa::path(get, path = "/async/{statusId}", tag = "agents",
    security(("bearer" = [])),
    params(("statusId" = String, Path, description = "Status id from POST /agents/{agentId}/async")),
    responses(
        (status = 200, description = "The turn's state", body = AsyncTurnView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such detached turn in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn get_async(
    Account(account): Account,
    State(state): State<AppState>,
    Path(status_id): Path<String>,
) -> ApiResult<Json<AsyncTurnView>> {
    let not_found = || ApiError::NotFound("detached turn");
    let id = Uuid::try_parse(&status_id).map_err(|_| not_found())?;
    let record = async_turns::get(state.pool(), &account, id)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => not_found(),
            other => other.into(),
        })?;
    Ok(Json(AsyncTurnView {
        status_id: record.id.to_string(),
        status: record.status,
        conversation_id: record.conversation_id,
        messages: record.messages.map(|messages| match messages {
            Value::Array(stored) => {
                Value::Array(stored.into_iter().map(UiMessage::rewrite_stored).collect())
            }
            other => other,
        }),
        error: record.error,
        created_at: record.created_at,
        updated_at: record.updated_at,
    }))
}
