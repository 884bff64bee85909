//! `/operator/accounts/{accountId}/limits`: an operator reads, overrides and
//! resets one account's limits. Authorised by the operator key alone
//! ([`Operator`]); a tenant token is refused. A change reaches every server
//! process at once (`NOTIFY`); the next request of the account is held to it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use toolserver_domain::{AccountId, AccountLimits, LimitOverrides};
use toolserver_store::account_limits;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Operator;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// One account's limits as an operator sees them.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountLimitsView {
    /// The account.
    pub account: String,
    /// The limits in force: the defaults with the overrides put over them.
    pub limits: AccountLimits,
    /// The stored overrides (only the limits they change).
    pub overrides: LimitOverrides,
    /// The deployment defaults.
    pub defaults: AccountLimits,
}

/// The operator routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_limits, put_limits, reset_limits))
}

/// Reads an account's limits.
#[utoipa::path(get, path = "/operator/accounts/{accountId}/limits", tag = "operator",
    security(("operator" = [])),
    params(("accountId" = String, Path, description = "Account id")),
    responses(
        (status = 200, description = "The account's limits", body = AccountLimitsView),
        (status = 401, description = "Missing operator key, or a tenant token", body = ErrorBody),
        (status = 403, description = "Operator routes are switched off", body = ErrorBody),
        (status = 422, description = "Not a valid account id", body = ErrorBody),
    ))]
pub async fn get_limits(
    _: Operator,
    State(state): State<AppState>,
    Path(account): Path<String>,
) -> ApiResult<Json<AccountLimitsView>> {
    let account = parse_account(&account)?;
    Ok(Json(view(&state, account).await?))
}

/// Replaces an account's overrides: the limits named are set, the others
/// follow the deployment defaults.
#[utoipa::path(put, path = "/operator/accounts/{accountId}/limits", tag = "operator",
    security(("operator" = [])),
    params(("accountId" = String, Path, description = "Account id")),
    request_body = LimitOverrides,
    responses(
        (status = 200, description = "The account's limits now", body = AccountLimitsView),
        (status = 400, description = "Malformed body or unknown limit", body = ErrorBody),
        (status = 401, description = "Missing operator key, or a tenant token", body = ErrorBody),
        (status = 403, description = "Operator routes are switched off", body = ErrorBody),
        (status = 422, description = "Not a valid account id", body = ErrorBody),
    ))]
pub async fn put_limits(
    _: Operator,
    State(state): State<AppState>,
    Path(account): Path<String>,
    ApiJson(overrides): ApiJson<LimitOverrides>,
) -> ApiResult<Json<AccountLimitsView>> {
    let account = parse_account(&account)?;
    account_limits::put(state.pool(), &account, &overrides).await?;
    state.admission().invalidate(&account);
    tracing::info!(account.id = %account, ?overrides, "account limits overridden");
    Ok(Json(view(&state, account).await?))
}

/// Removes an account's overrides: its limits are the defaults again.
#[utoipa::path(delete, path = "/operator/accounts/{accountId}/limits", tag = "operator",
    security(("operator" = [])),
    params(("accountId" = String, Path, description = "Account id")),
    responses(
        (status = 204, description = "The account follows the defaults"),
        (status = 401, description = "Missing operator key, or a tenant token", body = ErrorBody),
        (status = 403, description = "Operator routes are switched off", body = ErrorBody),
        (status = 422, description = "Not a valid account id", body = ErrorBody),
    ))]
pub async fn reset_limits(
    _: Operator,
    State(state): State<AppState>,
    Path(account): Path<String>,
) -> ApiResult<StatusCode> {
    let account = parse_account(&account)?;
    account_limits::clear(state.pool(), &account).await?;
    state.admission().invalidate(&account);
    tracing::info!(account.id = %account, "account limits reset to the defaults");
    Ok(StatusCode::NO_CONTENT)
}

fn parse_account(raw: &str) -> ApiResult<AccountId> {
    Ok(AccountId::parse(raw)?)
}

async fn view(state: &AppState, account: AccountId) -> ApiResult<AccountLimitsView> {
    let overrides = account_limits::get(state.pool(), &account).await?;
    let defaults = *state.admission().defaults();
    Ok(AccountLimitsView {
        account: account.to_string(),
        limits: defaults.overridden_by(&overrides),
        overrides,
        defaults,
    })
}
