//! `/accounts/me/secrets`: an account's named secrets, which HTTP tools
//! name as `{{secret.NAME}}`. A value is sealed as it arrives and never
//! read back: the API lists names and times only, and only the server,
//! making a tool's request, ever opens one.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use toolserver_domain::http_tool::is_secret_name;
use toolserver_domain::{refuse_nul_text, ValidationError};
use toolserver_store::account_secrets::{self, SecretEntry};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// A secret's new value.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretValue {
    /// The value: 1 character up to the server's limit (`TOOLSERVER_MAX_SECRET_CHARS`).
    pub value: String,
}

/// A secret as listed: never its value.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretView {
    /// The name templates use (`{{secret.NAME}}`).
    pub name: String,
    /// When it was first set (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// When its value last changed (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

impl From<SecretEntry> for SecretView {
    fn from(entry: SecretEntry) -> Self {
        Self {
            name: entry.name,
            created_at: entry.created_at,
            updated_at: entry.updated_at,
        }
    }
}

/// The account's secrets.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretList {
    /// Every secret, by name.
    pub secrets: Vec<SecretView>,
}

/// The secret routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_secrets))
        .routes(routes!(put_secret, delete_secret))
}

/// Lists the account's secrets by name; values are never shown.
#[utoipa::path(get, path = "/accounts/me/secrets", tag = "secrets",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every secret's name and times", body = SecretList),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn list_secrets(
    Account(account): Account,
    State(state): State<AppState>,
) -> ApiResult<Json<SecretList>> {
    let entries = account_secrets::list(state.pool(), &account).await?;
    Ok(Json(SecretList {
        secrets: entries.into_iter().map(SecretView::from).collect(),
    }))
}

/// Sets a secret, creating it or replacing its value.
#[utoipa::path(put, path = "/accounts/me/secrets/{name}", tag = "secrets",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The secret's name: 1-64 letters, digits or `_`")),
    request_body = SecretValue,
    responses(
        (status = 200, description = "Its value was replaced", body = SecretView),
        (status = 201, description = "It was created", body = SecretView),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 409, description = "The account keeps as many secrets as it may (`secrets_limit_reached`, `TOOLSERVER_MAX_SECRETS_PER_ACCOUNT`)", body = ErrorBody),
        (status = 422, description = "The name or the value breaks a rule", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn put_secret(
    Account(account): Account,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<SecretValue>,
) -> ApiResult<impl IntoResponse> {
    if !is_secret_name(&name) {
        return Err(ValidationError::new("name", "must be 1-64 letters, digits or '_'").into());
    }
    let limits = &state.settings().limits;
    check_value(&body.value, limits.max_secret_chars)?;
    let pool = state.pool();
    let kept = account_secrets::count(pool, &account).await?;
    if usize::try_from(kept).unwrap_or(usize::MAX) >= limits.max_secrets
        && !account_secrets::exists(pool, &account, &name).await?
    {
        return Err(ApiError::Conflict {
            code: "secrets_limit_reached",
            message: format!(
                "the account keeps {kept} secrets, as many as it may ({}); delete one first",
                limits.max_secrets
            ),
        });
    }
    let sealed = state
        .harness()
        .sealer()
        .seal_account_secret(&body.value, &account, &name)
        .ok_or_else(|| ApiError::Unavailable("the secret could not be sealed".into()))?;
    let (entry, created) = account_secrets::put(pool, &account, &name, &sealed).await?;
    tracing::info!(secret.name = %entry.name, created, "account secret set");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(SecretView::from(entry))))
}

/// Deletes a secret; tools that name it fail their calls until it is set again.
#[utoipa::path(delete, path = "/accounts/me/secrets/{name}", tag = "secrets",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The secret's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such secret in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn delete_secret(
    Account(account): Account,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    if !is_secret_name(&name) {
        return Err(ApiError::NotFound("secret"));
    }
    account_secrets::delete(state.pool(), &account, &name)
        .await
        .map_err(|err| match err {
            toolserver_store::StoreError::NotFound => ApiError::NotFound("secret"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}

fn check_value(value: &str, max: usize) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new("value", "must not be empty"));
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(ValidationError::new(
            "value",
            format!("is {chars} characters; the limit is {max}"),
        ));
    }
    refuse_nul_text("value", value)
}
