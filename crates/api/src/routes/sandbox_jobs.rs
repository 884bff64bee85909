//! `POST /sandbox-jobs/{resultId}/complete`: a runner reports how a detached
//! async call ended. Authenticated by `x-job-token`, the call's own random
//! token: only its SHA-256 is stored, compared in constant time, and it is
//! useless for any other call. Answers are final, never retryable: 401 no
//! token, 403 wrong token, 404 unknown call, 200 settled (or the same
//! completion again), 409 settled differently, 410 expired.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use toolserver_store::async_results::{self, AsyncOutcome, Settlement};
use toolserver_store::StoreError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Header carrying the per-call job token.
pub const JOB_TOKEN_HEADER: &str = "x-job-token";

/// The completion routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(complete))
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
    pub status: String,
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
#[tracing::instrument(skip_all, fields(result.id = %result_id))]
pub async fn complete(
    State(state): State<AppState>,
    Path(result_id): Path<String>,
    headers: HeaderMap,
    ApiJson(completion): ApiJson<Completion>,
) -> ApiResult<Json<CompletionReceipt>> {
    let not_found = || ApiError::NotFound("async result");
    let id = Uuid::try_parse(&result_id).map_err(|_| not_found())?;
    let token = headers
        .get(JOB_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::Unauthorized(format!("the {JOB_TOKEN_HEADER} header is required"))
        })?;
    let stored = async_results::token_hash(state.pool(), id)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => not_found(),
            other => other.into(),
        })?;
    let presented = Sha256::digest(token.as_bytes());
    if !bool::from(presented.as_slice().ct_eq(stored.as_slice())) {
        return Err(ApiError::Forbidden(format!(
            "the {JOB_TOKEN_HEADER} does not belong to this call"
        )));
    }
    let outcome = match completion {
        Completion::Completed { response } => AsyncOutcome::Completed(response),
        Completion::Failed { error } if error.trim().is_empty() => {
            return Err(ApiError::bad_field("error", "must not be empty"))
        }
        Completion::Failed { error } => AsyncOutcome::Failed(error),
    };
    let status = match &outcome {
        AsyncOutcome::Completed(_) => "completed",
        AsyncOutcome::Failed(_) => "failed",
    };
    let receipt = |replay| {
        Json(CompletionReceipt {
            status: status.to_owned(),
            replay,
        })
    };
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
