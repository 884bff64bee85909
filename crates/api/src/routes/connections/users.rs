//! `/accounts/me/connections`: end users' connections, and starting one
//! outside a turn. A token that names an end user sees and starts that
//! user's connections alone.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use toolserver_domain::http_tool::is_secret_name;
use toolserver_domain::{refuse_nul_text, ValidationError};
use toolserver_harness::connections::{ConnectionError, ACCOUNT_USER};
use toolserver_store::oauth_connections;
use toolserver_store::StoreError;

use super::wire::{AuthorizationView, AuthorizeBody, ConnectionList, ConnectionView, UserQuery};
use crate::auth::{Account, EndUser};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Longest end user name a request may give.
const MAX_USER_CHARS: usize = 255;

/// Lists connections (of one end user, or all), never their tokens.
#[utoipa::path(get, path = "/accounts/me/connections", tag = "connections",
    security(("bearer" = [])),
    params(UserQuery),
    responses(
        (status = 200, description = "The connections", body = ConnectionList),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The token's end user asks for another's", body = ErrorBody),
        (status = 422, description = "`user` is longer than 255 characters or holds NUL", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn list_connections(
    Account(account): Account,
    EndUser(end_user): EndUser,
    State(state): State<AppState>,
    Query(query): Query<UserQuery>,
) -> ApiResult<Json<ConnectionList>> {
    check_user("user", query.user.as_deref())?;
    let user = match end_user {
        Some(_) => Some(whose(end_user.as_deref(), query.user.as_deref())?),
        None => query.user,
    };
    let records = oauth_connections::list(state.pool(), &account, user.as_deref()).await?;
    Ok(Json(ConnectionList {
        connections: records.into_iter().map(ConnectionView::from).collect(),
    }))
}

/// Forgets a connection; calls that need it ask for authorization again.
#[utoipa::path(delete, path = "/accounts/me/connections/{provider}", tag = "connections",
    security(("bearer" = [])),
    params(("provider" = String, Path, description = "The provider's name"), UserQuery),
    responses(
        (status = 204, description = "Forgotten"),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The token's end user names another", body = ErrorBody),
        (status = 404, description = "No such connection", body = ErrorBody),
        (status = 422, description = "`user` is longer than 255 characters or holds NUL", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn delete_connection(
    Account(account): Account,
    EndUser(end_user): EndUser,
    State(state): State<AppState>,
    Path(provider): Path<String>,
    Query(query): Query<UserQuery>,
) -> ApiResult<StatusCode> {
    check_user("user", query.user.as_deref())?;
    let user = whose(end_user.as_deref(), query.user.as_deref())?;
    if !is_secret_name(&provider) {
        return Err(ApiError::NotFound("connection"));
    }
    oauth_connections::delete(state.pool(), &account, &provider, &user)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::NotFound("connection"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}

/// Starts an authorization outside a turn: send the end user to the URL;
/// the redirect back stores the connection.
#[utoipa::path(post, path = "/accounts/me/connections/{provider}/authorize", tag = "connections",
    security(("bearer" = [])),
    params(("provider" = String, Path, description = "The provider's name")),
    request_body = AuthorizeBody,
    responses(
        (status = 201, description = "Started", body = AuthorizationView),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The token's end user names another", body = ErrorBody),
        (status = 404, description = "No such provider in this account", body = ErrorBody),
        (status = 422, description = "`user` is longer than 255 characters or holds NUL", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn authorize(
    Account(account): Account,
    EndUser(end_user): EndUser,
    State(state): State<AppState>,
    Path(provider): Path<String>,
    ApiJson(body): ApiJson<AuthorizeBody>,
) -> ApiResult<(StatusCode, Json<AuthorizationView>)> {
    check_user("user", body.user.as_deref())?;
    let user = whose(end_user.as_deref(), body.user.as_deref())?;
    if !is_secret_name(&provider) {
        return Err(ApiError::NotFound("OAuth provider"));
    }
    let lifecycle = state.lifecycle();
    let redirect = lifecycle.oauth_redirect();
    let ttl = state.harness().settings().lifecycle.authorization_ttl;
    let started = lifecycle
        .connections()
        .start(&account, (&provider, &user), None, (&redirect, ttl))
        .await
        .map_err(|err| match err {
            ConnectionError::NoProvider(_) => ApiError::NotFound("OAuth provider"),
            ConnectionError::Store(err) => err.into(),
            other => ApiError::Unavailable(other.to_string()),
        })?;
    Ok((
        StatusCode::CREATED,
        Json(AuthorizationView {
            authorization_id: started.id,
            url: started.url.to_string(),
            expires_at: started.expires_at,
        }),
    ))
}

/// Refuses an end user name longer than 255 characters or holding NUL.
fn check_user(field: &str, user: Option<&str>) -> Result<(), ValidationError> {
    let Some(user) = user else { return Ok(()) };
    if user.chars().count() > MAX_USER_CHARS {
        return Err(ValidationError::new(
            field,
            format!("is longer than {MAX_USER_CHARS} characters"),
        ));
    }
    refuse_nul_text(field, user)
}

/// The end user a request acts on: the token's, which may name no other;
/// else the one asked for, else the account itself.
fn whose(token_user: Option<&str>, asked: Option<&str>) -> Result<String, ApiError> {
    match (token_user, asked) {
        (Some(token), Some(asked)) if token != asked => Err(ApiError::Forbidden(
            "a token that names an end user acts on that user's connections alone".into(),
        )),
        (Some(user), _) | (None, Some(user)) => Ok(user.to_owned()),
        (None, None) => Ok(ACCOUNT_USER.to_owned()),
    }
}
