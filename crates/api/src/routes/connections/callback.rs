//! `GET /oauth/callback`: where providers send the end user back. The
//! state names the authorization (no token is needed); the code is
//! exchanged, the connection stored, and the call that waited resumed. A
//! browser (`Accept: text/html`) gets a page saying so; anything else the
//! JSON answer.

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use toolserver_harness::connections::{ConnectionError, ACCOUNT_USER};

use super::page;
use super::wire::{CallbackQuery, CallbackView};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// Completes an authorization from the provider's redirect.
#[utoipa::path(get, path = "/oauth/callback", tag = "connections",
    params(CallbackQuery),
    responses(
        (status = 200, description = "Connected; the call that waited (if any) resumes. A browser gets a page saying so",
            content((CallbackView = "application/json"), (String = "text/html"))),
        (status = 400, description = "No state or code, or the provider refused",
            content((ErrorBody = "application/json"), (String = "text/html"))),
        (status = 404, description = "No pending authorization has this state (unknown, used or expired)",
            content((ErrorBody = "application/json"), (String = "text/html"))),
        (status = 503, description = "The provider could not be reached; follow the authorization URL again",
            content((ErrorBody = "application/json"), (String = "text/html"))),
    ))]
#[tracing::instrument(skip_all)]
pub async fn oauth_callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let completed = complete(&state, query).await;
    if !wants_html(&headers) {
        return completed.map(Json).into_response();
    }
    match completed {
        Ok(view) => page::connected(&view.provider),
        Err(err) => {
            let message = err.to_string();
            page::failed(err.into_response().status(), &message)
        }
    }
}

/// Whether the client asks for HTML (a browser following the redirect).
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

async fn complete(state: &AppState, query: CallbackQuery) -> ApiResult<CallbackView> {
    let Some(state_token) = query.state.as_deref().filter(|s| !s.is_empty()) else {
        return Err(ApiError::BadRequest {
            field: Some("state".into()),
            message: "the redirect carries no `state`".into(),
        });
    };
    let answer = match (&query.code, &query.error) {
        (_, Some(error)) => Err(match &query.error_description {
            Some(described) => format!("{error}: {described}"),
            None => error.clone(),
        }),
        (Some(code), None) if !code.is_empty() => Ok(code.as_str()),
        _ => {
            return Err(ApiError::BadRequest {
                field: Some("code".into()),
                message: "the redirect carries neither `code` nor `error`".into(),
            })
        }
    };
    let completed = state
        .lifecycle()
        .complete_authorization(state_token, answer)
        .await
        .map_err(|err| match err {
            ConnectionError::UnknownAuthorization => ApiError::NotFound("authorization"),
            ConnectionError::Refused(_) | ConnectionError::NoProvider(_) => ApiError::BadRequest {
                field: None,
                message: err.to_string(),
            },
            ConnectionError::Store(err) => err.into(),
            other => ApiError::Unavailable(other.to_string()),
        })?;
    Ok(CallbackView {
        connected: true,
        provider: completed.provider,
        user: (completed.user != ACCOUNT_USER).then_some(completed.user),
        resumed_turn: completed.resumed_turn,
    })
}
