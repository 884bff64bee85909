//! `/accounts/me/oauth-providers`: the OAuth providers an account's end
//! users connect to.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use toolserver_domain::http_tool::is_secret_name;
use toolserver_domain::{refuse_nul_text, ValidationError};
use toolserver_harness::connections::seal_client_secret;
use toolserver_harness::outbound;
use toolserver_store::oauth_providers::{self, NewOAuthProvider};
use toolserver_store::StoreError;
use url::Url;

use super::wire::{ProviderBody, ProviderList, ProviderView};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Most scopes one provider asks for.
const MAX_SCOPES: usize = 64;
/// Longest client id, scope or URL accepted.
const MAX_FIELD_CHARS: usize = 2048;

/// Lists the account's OAuth providers; client secrets are never shown.
#[utoipa::path(get, path = "/accounts/me/oauth-providers", tag = "connections",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every provider", body = ProviderList),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn list_providers(
    Account(account): Account,
    State(state): State<AppState>,
) -> ApiResult<Json<ProviderList>> {
    let records = oauth_providers::list(state.pool(), &account).await?;
    Ok(Json(ProviderList {
        providers: records.into_iter().map(ProviderView::from).collect(),
    }))
}

/// Configures an OAuth provider, creating or replacing it.
#[utoipa::path(put, path = "/accounts/me/oauth-providers/{name}", tag = "connections",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The provider's name: 1-64 letters, digits or `_`")),
    request_body = ProviderBody,
    responses(
        (status = 200, description = "It was replaced", body = ProviderView),
        (status = 201, description = "It was created", body = ProviderView),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 409, description = "The account keeps as many providers as it may (`oauth_providers_limit_reached`, `TOOLSERVER_MAX_SECRETS_PER_ACCOUNT`)", body = ErrorBody),
        (status = 422, description = "A field breaks a rule (e.g. a token endpoint that is not a public address)", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn put_provider(
    Account(account): Account,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ProviderBody>,
) -> ApiResult<impl IntoResponse> {
    if !is_secret_name(&name) {
        return Err(ValidationError::new("name", "must be 1-64 letters, digits or '_'").into());
    }
    let authorization_url =
        endpoint(&state, "authorizationUrl", &body.authorization_url, false).await?;
    let token_url = endpoint(&state, "tokenUrl", &body.token_url, true).await?;
    let webhook = match &body.webhook {
        Some(webhook) => Some(endpoint(&state, "webhook", webhook, false).await?),
        None => None,
    };
    check_text("clientId", &body.client_id)?;
    if body.scopes.len() > MAX_SCOPES {
        return Err(ValidationError::new(
            "scopes",
            format!(
                "has {} scopes; the limit is {MAX_SCOPES}",
                body.scopes.len()
            ),
        )
        .into());
    }
    for scope in &body.scopes {
        check_text("scopes", scope)?;
        if scope.chars().any(char::is_whitespace) {
            return Err(ValidationError::new(
                "scopes",
                format!("{scope:?} has whitespace; give each scope apart"),
            )
            .into());
        }
    }
    let limits = &state.settings().limits;
    let pool = state.pool();
    let existing = match oauth_providers::get(pool, &account, &name).await {
        Ok(record) => Some(record),
        Err(StoreError::NotFound) => None,
        Err(err) => return Err(err.into()),
    };
    let kept = oauth_providers::count(pool, &account).await?;
    if existing.is_none() && usize::try_from(kept).unwrap_or(usize::MAX) >= limits.max_secrets {
        return Err(ApiError::Conflict {
            code: "oauth_providers_limit_reached",
            message: format!(
                "the account keeps {kept} OAuth providers, as many as it may ({}); delete one first",
                limits.max_secrets
            ),
        });
    }
    let sealed = match &body.client_secret {
        Some(secret) => {
            check_text("clientSecret", secret)?;
            if secret.chars().count() > limits.max_secret_chars {
                return Err(ValidationError::new(
                    "clientSecret",
                    format!("is longer than {} characters", limits.max_secret_chars),
                )
                .into());
            }
            Some(
                seal_client_secret(state.harness().sealer(), &account, &name, secret).ok_or_else(
                    || ApiError::Unavailable("the client secret could not be sealed".into()),
                )?,
            )
        }
        None => existing.and_then(|record| record.client_secret_sealed),
    };
    let provider = NewOAuthProvider {
        name: &name,
        authorization_url: authorization_url.as_str(),
        token_url: token_url.as_str(),
        client_id: &body.client_id,
        client_secret_sealed: sealed.as_deref(),
        scopes: &body.scopes,
        webhook: webhook.as_ref().map(Url::as_str),
    };
    let (record, created) = oauth_providers::put(pool, &account, &provider).await?;
    tracing::info!(provider = %record.name, created, "OAuth provider configured");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(ProviderView::from(record))))
}

/// Deletes an OAuth provider with every connection to it.
#[utoipa::path(delete, path = "/accounts/me/oauth-providers/{name}", tag = "connections",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The provider's name")),
    responses(
        (status = 204, description = "Deleted, with its connections"),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such provider in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn delete_provider(
    Account(account): Account,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    if !is_secret_name(&name) {
        return Err(ApiError::NotFound("OAuth provider"));
    }
    oauth_providers::delete(state.pool(), &account, &name)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::NotFound("OAuth provider"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}

/// `raw` as an http(s) URL; one the server itself requests (`reached`) must
/// be an address it may reach.
async fn endpoint(
    state: &AppState,
    field: &str,
    raw: &str,
    reached: bool,
) -> Result<Url, ApiError> {
    check_text(field, raw)?;
    let url = Url::parse(raw)
        .map_err(|err| ValidationError::new(field, format!("is not a URL: {err}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ValidationError::new(field, "must be an http or https URL with a host").into());
    }
    if reached {
        let harness = state.harness();
        outbound::check_destination(
            &url,
            &harness.sources().policy,
            harness.settings().outbound_resolve_timeout,
        )
        .await
        .map_err(|reason| ValidationError::new(field, reason))?;
    }
    Ok(url)
}

/// A required text field: not empty, not too long, no NUL.
fn check_text(field: &str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    if value.chars().count() > MAX_FIELD_CHARS {
        return Err(ValidationError::new(
            field,
            format!("is longer than {MAX_FIELD_CHARS} characters"),
        ));
    }
    refuse_nul_text(field, value)
}
