//! `GET`/`PUT /policies/users/{user}` and
//! `GET`/`PUT /conversations/{conversationId}/policies`: the layers that
//! narrow one end user's calls, and the calls in one conversation, below
//! the account's and the agent's.

use axum::extract::{Path, State};
use axum::Json;
use toolserver_domain::{refuse_nul_text, AccountId, ConversationId};
use toolserver_harness::policy;
use toolserver_store::config_changes::ConfigChange;
use toolserver_store::scoped_policies::{self, PolicyScope};

use super::save::check_error;
use super::wire::{ScopedPoliciesBody, ScopedPoliciesView};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Longest end user id, in characters (a token's `sub` is kept up to 255
/// bytes, so no longer one can name an end user).
const MAX_USER_CHARS: usize = 255;

/// Reads the policies narrowing one end user's calls.
#[utoipa::path(get, path = "/policies/users/{user}", tag = "policies",
    security(("bearer" = [])),
    params(("user" = String, Path, description = "The end user (a token's `sub`)")),
    responses(
        (status = 200, description = "The end user's policies (empty text and version 0 when none were ever saved)", body = ScopedPoliciesView),
        (status = 400, description = "Malformed end user", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn get_user_policies(
    Account(account): Account,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> ApiResult<Json<ScopedPoliciesView>> {
    check_user(&user)?;
    let record = scoped_policies::get(state.pool(), &account, PolicyScope::User, &user).await?;
    Ok(Json(record.into()))
}

/// Replaces the policies narrowing one end user's calls, after Cedar's
/// validator checked them against a schema of the account's tools.
#[utoipa::path(put, path = "/policies/users/{user}", tag = "policies",
    security(("bearer" = [])),
    params(("user" = String, Path, description = "The end user (a token's `sub`)")),
    request_body = ScopedPoliciesBody,
    responses(
        (status = 200, description = "The policies as saved", body = ScopedPoliciesView),
        (status = 400, description = "Malformed body, unknown field or malformed end user", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 422, description = "The text is not Cedar this server takes, or Cedar's validator refuses it against the account's tools; the message is the parser's or the validator's", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn put_user_policies(
    Account(account): Account,
    State(state): State<AppState>,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<ScopedPoliciesBody>,
) -> ApiResult<Json<ScopedPoliciesView>> {
    check_user(&user)?;
    save(&state, &account, (PolicyScope::User, &user), &body.policies).await
}

/// Reads the policies narrowing the calls in one conversation.
#[utoipa::path(get, path = "/conversations/{conversationId}/policies", tag = "policies",
    security(("bearer" = [])),
    params(("conversationId" = String, Path, description = "Conversation id (the chat id)")),
    responses(
        (status = 200, description = "The conversation's policies (empty text and version 0 when none were ever saved)", body = ScopedPoliciesView),
        (status = 400, description = "Malformed conversation id", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn get_conversation_policies(
    Account(account): Account,
    State(state): State<AppState>,
    Path(conversation): Path<String>,
) -> ApiResult<Json<ScopedPoliciesView>> {
    let conversation = conversation_id(&conversation)?;
    let scope = PolicyScope::Conversation;
    let record = scoped_policies::get(state.pool(), &account, scope, conversation.as_str()).await?;
    Ok(Json(record.into()))
}

/// Replaces the policies narrowing the calls in one conversation (it need
/// not exist yet), after Cedar's validator checked them against a schema
/// of the account's tools.
#[utoipa::path(put, path = "/conversations/{conversationId}/policies", tag = "policies",
    security(("bearer" = [])),
    params(("conversationId" = String, Path, description = "Conversation id (the chat id)")),
    request_body = ScopedPoliciesBody,
    responses(
        (status = 200, description = "The policies as saved", body = ScopedPoliciesView),
        (status = 400, description = "Malformed body, unknown field or malformed conversation id", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 422, description = "The text is not Cedar this server takes, or Cedar's validator refuses it against the account's tools; the message is the parser's or the validator's", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn put_conversation_policies(
    Account(account): Account,
    State(state): State<AppState>,
    Path(conversation): Path<String>,
    ApiJson(body): ApiJson<ScopedPoliciesBody>,
) -> ApiResult<Json<ScopedPoliciesView>> {
    let conversation = conversation_id(&conversation)?;
    let scope = (PolicyScope::Conversation, conversation.as_str());
    save(&state, &account, scope, &body.policies).await
}

/// Checks `text` against the account's tools and stores it for `scope`.
async fn save(
    state: &AppState,
    account: &AccountId,
    scope: (PolicyScope, &str),
    text: &str,
) -> ApiResult<Json<ScopedPoliciesView>> {
    refuse_nul_text("policies", text)?;
    policy::check_layer(state.pool(), account, text)
        .await
        .map_err(check_error)?;
    let saved = scoped_policies::put(state.pool(), account, scope, text).await;
    state.config_changed(&ConfigChange::ScopedPolicies(account.clone()));
    Ok(Json(Some(saved?).into()))
}

/// An end user id names a token's `sub`: 1 to 255 characters, no NUL.
fn check_user(user: &str) -> Result<(), ApiError> {
    let chars = user.chars().count();
    if chars == 0 || chars > MAX_USER_CHARS || user.contains('\0') {
        return Err(ApiError::bad_field(
            "user",
            format!("an end user id is 1 to {MAX_USER_CHARS} characters without NUL"),
        ));
    }
    Ok(())
}

fn conversation_id(raw: &str) -> Result<ConversationId, ApiError> {
    Ok(ConversationId::parse("conversationId", raw)?)
}
