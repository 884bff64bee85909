//! The runner's routes for a detached async call, authenticated by
//! `x-job-token`, the call's own random token: only its SHA-256 is stored,
//! it is compared in constant time, and it is useless for any other call.
//! The token is checked before the body is read.
//!
//! - `POST /sandbox-jobs/{resultId}/complete`: how the call ended.
//! - `POST /sandbox-jobs/{resultId}/heartbeat`: the call is alive (the
//!   runner's automatic ping, `{"liveness": true}`), or the tool reports
//!   progress (`{"progress": …}`), which also moves the call's heartbeat
//!   deadline.
//!
//! Answers are final, never retryable: 401 no token, 403 wrong token, 404
//! unknown call, 200 done (or the same completion again), 409 settled
//! (differently, for a completion), 410 expired.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use subtle::ConstantTimeEq;
use time::OffsetDateTime;
use toolserver_domain::{CallStatus, JobToken, ResultId};
use toolserver_store::async_results::{self, AsyncOutcome, Beat, HeartbeatAnswer, Settlement};
use toolserver_store::StoreError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Header carrying the per-call job token.
pub const JOB_TOKEN_HEADER: &str = "x-job-token";

/// The completion routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(complete))
        .routes(routes!(heartbeat))
}

/// The call a request's `x-job-token` authenticates (the `resultId` of the path).
pub struct JobCall(ResultId);

impl FromRequestParts<AppState> for JobCall {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let not_found = || ApiError::NotFound("async result");
        let Path(params): Path<Vec<String>> = Path::from_request_parts(parts, state)
            .await
            .map_err(|_| not_found())?;
        let id = params
            .first()
            .and_then(|raw| ResultId::parse(raw).ok())
            .ok_or_else(not_found)?;
        let token = parts
            .headers
            .get(JOB_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(JobToken::parse)
            .ok_or_else(|| {
                ApiError::Unauthorized(format!("the {JOB_TOKEN_HEADER} header is required"))
            })?;
        let stored =
            async_results::token_hash(state.pool(), id)
                .await
                .map_err(|err| match err {
                    StoreError::NotFound => not_found(),
                    other => other.into(),
                })?;
        let presented = token.sha256();
        if !bool::from(presented.as_slice().ct_eq(stored.as_slice())) {
            return Err(ApiError::Forbidden(format!(
                "the {JOB_TOKEN_HEADER} does not belong to this call"
            )));
        }
        Ok(Self(id))
    }
}

/// How the call ended.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "status", rename_all = "lowercase", deny_unknown_fields)]
pub enum Completion {
    /// The tool returned `response`.
    Completed {
        /// The tool's result.
        #[schema(value_type = Object)]
        response: Value,
    },
    /// The tool failed with `error`.
    Failed {
        /// What went wrong.
        error: String,
    },
}

/// What the completion did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompletionReceipt {
    /// The call's status now: `completed` or `failed`.
    pub status: CallStatus,
    /// True when the call had already been settled with this same completion.
    pub replay: bool,
}

/// Settles a detached async call.
#[utoipa::path(post, path = "/sandbox-jobs/{resultId}/complete", tag = "async",
    security(("jobToken" = [])),
    params(("resultId" = String, Path, description = "The call's result id")),
    request_body = Completion,
    responses(
        (status = 200, description = "Settled, or the same completion again (`replay: true`)", body = CompletionReceipt),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "No x-job-token", body = ErrorBody),
        (status = 403, description = "The token is not this call's", body = ErrorBody),
        (status = 404, description = "No such call", body = ErrorBody),
        (status = 409, description = "Already settled differently", body = ErrorBody),
        (status = 410, description = "The call expired before completing", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(result.id = %id))]
pub async fn complete(
    State(state): State<AppState>,
    JobCall(id): JobCall,
    ApiJson(completion): ApiJson<Completion>,
) -> ApiResult<Json<CompletionReceipt>> {
    let outcome = match completion {
        Completion::Completed { response } => AsyncOutcome::Completed(response),
        Completion::Failed { error } if error.trim().is_empty() => {
            return Err(ApiError::bad_field("error", "must not be empty"))
        }
        Completion::Failed { error } => AsyncOutcome::Failed(error),
    };
    let status = outcome.status();
    let receipt = |replay| Json(CompletionReceipt { status, replay });
    match async_results::settle(state.pool(), id, &outcome).await? {
        Settlement::Settled { continued } => {
            tracing::info!(continued, "async call settled");
            Ok(receipt(false))
        }
        Settlement::Replay => Ok(receipt(true)),
        Settlement::Conflict(current) => Err(ApiError::Conflict {
            code: "already_settled",
            message: format!("the call was already settled as {current}"),
        }),
        Settlement::Expired => Err(ApiError::Gone(
            "the call expired before it completed".into(),
        )),
    }
}

/// A heartbeat of a detached call.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Heartbeat {
    /// What the tool reports of its progress (any JSON); kept and shown by
    /// `async_status`.
    #[schema(value_type = Option<Object>)]
    pub progress: Option<Value>,
    /// `true` for the runner's automatic ping: the call is still running.
    /// It keeps the call alive but does not move its heartbeat deadline.
    pub liveness: Option<bool>,
}

/// What a heartbeat found.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatReceipt {
    /// Always `pending`: the call goes on.
    pub status: CallStatus,
    /// When the call expires unless another heartbeat comes first (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
}

/// Records a heartbeat of a detached async call.
#[utoipa::path(post, path = "/sandbox-jobs/{resultId}/heartbeat", tag = "async",
    security(("jobToken" = [])),
    params(("resultId" = String, Path, description = "The call's result id")),
    request_body = Heartbeat,
    responses(
        (status = 200, description = "Recorded; the call goes on", body = HeartbeatReceipt),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "No x-job-token", body = ErrorBody),
        (status = 403, description = "The token is not this call's", body = ErrorBody),
        (status = 404, description = "No such call", body = ErrorBody),
        (status = 409, description = "The call has settled already: stop", body = ErrorBody),
        (status = 410, description = "The call expired: stop", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(result.id = %id))]
pub async fn heartbeat(
    State(state): State<AppState>,
    JobCall(id): JobCall,
    ApiJson(body): ApiJson<Heartbeat>,
) -> ApiResult<Json<HeartbeatReceipt>> {
    let beat = if body.liveness == Some(true) {
        Beat::Liveness
    } else {
        Beat::Tool(body.progress.map(|p| p.to_string()))
    };
    let liveness = state.harness().settings().lifecycle.liveness_timeout;
    match async_results::heartbeat(state.pool(), id, &beat, liveness).await? {
        HeartbeatAnswer::Pending(expires_at) => Ok(Json(HeartbeatReceipt {
            status: CallStatus::Pending,
            expires_at,
        })),
        HeartbeatAnswer::Settled(status) => Err(ApiError::Conflict {
            code: "already_settled",
            message: format!("the call was already settled as {status}"),
        }),
        HeartbeatAnswer::Expired => Err(ApiError::Gone("the call expired".into())),
    }
}
