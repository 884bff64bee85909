//! `POST /approvals/{approvalId}` and `POST /approval-links/{token}`:
//! deciding an approval, from any client.

use axum::extract::{Path, State};
use axum::Json;
use toolserver_domain::refuse_nul_text;
use toolserver_harness::approvals::{DecideError, Decided, Decider};

use super::wire::{ApprovalView, DecisionBody, DecisionView};
use crate::auth::{Account, EndUser};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Longest reason kept with a decision, in characters.
const MAX_REASON_CHARS: usize = 2000;

/// Approves or denies one approval; the last decision its assistant
/// message waited for resumes the turn on the server.
#[utoipa::path(post, path = "/approvals/{approvalId}", tag = "approvals",
    security(("bearer" = [])),
    params(("approvalId" = String, Path, description = "The approval's id (`apr_…`)")),
    request_body = DecisionBody,
    responses(
        (status = 200, description = "The decision is recorded (and the turn resumed, when it was the last one its message waited for)", body = DecisionView),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The approval names its approvers, and the token's end user is not one (`not_an_approver`)", body = ErrorBody),
        (status = 404, description = "No such approval in this account", body = ErrorBody),
        (status = 409, description = "The approval was already decided (`approval_decided`)", body = ErrorBody),
        (status = 410, description = "The approval expired undecided; the call was denied", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(approval.id = %id))]
pub async fn decide_approval(
    Account(account): Account,
    EndUser(user): EndUser,
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> ApiResult<Json<DecisionView>> {
    check_reason(&body)?;
    let decider = match user {
        Some(sub) => Decider::User(sub),
        None => Decider::Account,
    };
    let decided = state
        .lifecycle()
        .decide_approval(
            &account,
            &id,
            (body.approved, body.reason.as_deref()),
            decider,
        )
        .await
        .map_err(refusal)?;
    Ok(Json(view(decided)))
}

/// Approves or denies the approval whose one-time link this is: no token
/// needed, and the link works once.
#[utoipa::path(post, path = "/approval-links/{token}", tag = "approvals",
    params(("token" = String, Path, description = "The token of the link an approval's announcement carried (`apl_…`)")),
    request_body = DecisionBody,
    responses(
        (status = 200, description = "The decision is recorded (and the turn resumed, when it was the last one its message waited for)", body = DecisionView),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 404, description = "No approval has this link", body = ErrorBody),
        (status = 409, description = "The link was used, or the approval decided otherwise (`approval_decided`)", body = ErrorBody),
        (status = 410, description = "The approval expired undecided; the call was denied", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn decide_by_link(
    State(state): State<AppState>,
    Path(token): Path<String>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> ApiResult<Json<DecisionView>> {
    check_reason(&body)?;
    let decided = state
        .lifecycle()
        .decide_by_link(&token, (body.approved, body.reason.as_deref()))
        .await
        .map_err(refusal)?;
    Ok(Json(view(decided)))
}

fn check_reason(body: &DecisionBody) -> Result<(), ApiError> {
    let Some(reason) = &body.reason else {
        return Ok(());
    };
    refuse_nul_text("reason", reason).map_err(|err| ApiError::bad_field("reason", err.message))?;
    let chars = reason.chars().count();
    if chars > MAX_REASON_CHARS {
        return Err(ApiError::bad_field(
            "reason",
            format!("reason is {chars} characters; the limit is {MAX_REASON_CHARS}"),
        ));
    }
    Ok(())
}

fn view(decided: Decided) -> DecisionView {
    DecisionView {
        approval: ApprovalView::from(decided.approval),
        status_id: decided.resumed_turn.map(|id| id.to_string()),
    }
}

fn refusal(err: DecideError) -> ApiError {
    match err {
        DecideError::NotFound => ApiError::NotFound("approval"),
        DecideError::NotAnApprover(_) => ApiError::PolicyRefused {
            code: "not_an_approver",
            message: err.to_string(),
        },
        DecideError::AlreadyDecided(approval) if approval.status == "expired" => {
            ApiError::Gone(format!(
                "the approval expired at {}; the call was denied",
                approval.expires_at
            ))
        }
        DecideError::AlreadyDecided(_) => ApiError::Conflict {
            code: "approval_decided",
            message: err.to_string(),
        },
        DecideError::Expired(_) => ApiError::Gone(err.to_string()),
        DecideError::Store(store) => store.into(),
    }
}
