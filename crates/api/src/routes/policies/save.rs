//! `GET /policies` and `PUT /policies`.

use axum::extract::State;
use axum::Json;
use toolserver_domain::{refuse_nul_text, ValidationError};
use toolserver_harness::outbound;
use toolserver_harness::policy::{self, CheckError};
use toolserver_store::config_changes::ConfigChange;
use toolserver_store::policies;
use url::Url;

use super::wire::{PoliciesBody, PoliciesView};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Reads the account's policies.
#[utoipa::path(get, path = "/policies", tag = "policies",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The account's policies (empty text and version 0 when none were ever saved)", body = PoliciesView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn get_policies(
    Account(account): Account,
    State(state): State<AppState>,
) -> ApiResult<Json<PoliciesView>> {
    let record = policies::get(state.pool(), &account).await?;
    Ok(Json(record.into()))
}

/// Replaces the account's policies, after Cedar's validator checked them
/// against a schema of the account's tools.
#[utoipa::path(put, path = "/policies", tag = "policies",
    security(("bearer" = [])),
    request_body = PoliciesBody,
    responses(
        (status = 200, description = "The policies as saved", body = PoliciesView),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 422, description = "The text is not Cedar this server takes, or Cedar's validator refuses it against the account's tools (a policy naming an unknown tool or attribute); the message is the parser's or the validator's. Or `approvalWebhook` is not an http(s) URL the server may post to", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn put_policies(
    Account(account): Account,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<PoliciesBody>,
) -> ApiResult<Json<PoliciesView>> {
    refuse_nul_text("policies", &body.policies)?;
    policy::check_layer(state.pool(), &account, &body.policies)
        .await
        .map_err(check_error)?;
    let webhook = match &body.approval_webhook {
        Some(raw) => Some(webhook_url(&state, raw).await?),
        None => None,
    };
    let saved = policies::put(state.pool(), &account, &body.policies, webhook.as_deref()).await;
    state.config_changed(&ConfigChange::Policies(account));
    Ok(Json(Some(saved?).into()))
}

/// The approval webhook `raw`, when it is an http(s) URL the outbound
/// policy lets the server post to; else a 422 naming `approvalWebhook`.
async fn webhook_url(state: &AppState, raw: &str) -> Result<String, ApiError> {
    let field = "approvalWebhook";
    let url = Url::parse(raw)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
        .ok_or_else(|| ValidationError::new(field, "approvalWebhook must be an http(s) URL"))?;
    let harness = state.harness();
    outbound::check_destination(
        &url,
        &harness.sources().policy,
        harness.settings().outbound_resolve_timeout,
    )
    .await
    .map_err(|reason| ValidationError::new(field, reason))?;
    Ok(url.to_string())
}

/// A refused text is a 422 naming `policies`, with Cedar's message.
pub(super) fn check_error(err: CheckError) -> ApiError {
    match err {
        CheckError::Refused(refused) => {
            ValidationError::new("policies", refused.to_string()).into()
        }
        CheckError::Store(store) => store.into(),
    }
}
