//! `GET /agents/{agentId}/ws`: the AI SDK's `WebSocketChatTransport`
//! protocol. Turns (`send`), resumes (`resume`) and aborts (`abort`) of one
//! agent's conversations are multiplexed over one socket, each answered by
//! frames carrying its `requestId`; chunk sequences are the chunks' indexes
//! in the turn's recorded stream. A resume of a detached turn that is
//! between runs waits for its next run, so its result arrives without
//! polling.
//!
//! Browsers cannot set headers on a WebSocket handshake, so the bearer token
//! may also come as a subprotocol `bearer.<token>` (offer
//! [`CHAT_PROTOCOL`] beside it, which the server then selects, so the token
//! is not echoed) or as the query parameter `access_token`. The token is
//! checked once, at the handshake.

mod frames;
mod session;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::header::{AUTHORIZATION, SEC_WEBSOCKET_PROTOCOL};
use axum::http::request::Parts;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use toolserver_domain::AccountId;
use toolserver_store::agents;
use utoipa::IntoParams;

use super::{agent_not_found, parse_agent_id};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// The subprotocol the server selects when the client offers it.
pub const CHAT_PROTOCOL: &str = "toolserver.chat.v1";
/// The prefix of a subprotocol carrying the bearer token.
const BEARER_PROTOCOL_PREFIX: &str = "bearer.";

/// How a browser passes its token on the handshake.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SocketParams {
    /// The bearer token, for clients that cannot set the `Authorization`
    /// header or offer subprotocols.
    pub access_token: Option<String>,
}

/// Opens a chat socket for one agent.
#[utoipa::path(get, path = "/agents/{agentId}/ws", tag = "agents",
    security(("bearer" = [])),
    params(("agentId" = String, Path, description = "Agent id"), SocketParams),
    responses(
        (status = 101, description = "Switched to the WebSocket chat protocol: JSON text frames `send`/`resume`/`abort` from the client; `start`/`chunk`/`end`/`error`/`no-active` answers, each with its `requestId`"),
        (status = 400, description = "Not a WebSocket handshake (after the token and the agent are checked)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token (header, `bearer.<token>` subprotocol, or `access_token`)", body = ErrorBody),
        (status = 404, description = "No such agent in this account", body = ErrorBody),
        (status = 426, description = "The connection cannot be upgraded", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id))]
pub async fn chat_socket(
    SocketAccount {
        account,
        user,
        protocol,
    }: SocketAccount,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let id = parse_agent_id(&agent_id)?;
    agents::get(state.pool(), &account, id)
        .await
        .map_err(agent_not_found)?;
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(not_a_handshake) => return Ok(not_a_handshake.into_response()),
    };
    let upgrade = upgrade
        .max_message_size(state.settings().max_request_bytes)
        .protocols(protocol);
    let peer = session::Peer {
        state,
        account,
        user,
        agent_id,
    };
    Ok(upgrade.on_upgrade(move |socket| session::serve(socket, peer)))
}

/// The account of a socket handshake, and the subprotocol to select.
pub struct SocketAccount {
    /// The authenticated account.
    pub account: AccountId,
    /// The end user the token names (see [`crate::auth::EndUser`]).
    pub user: Option<String>,
    /// The subprotocol answered, if the client offered any.
    pub protocol: Option<String>,
}

impl FromRequestParts<AppState> for SocketAccount {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let offered: Vec<String> = parts
            .headers
            .get_all(SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(|protocol| protocol.trim().to_owned())
            .filter(|protocol| !protocol.is_empty())
            .collect();
        let bearer_protocol = offered
            .iter()
            .find(|protocol| protocol.starts_with(BEARER_PROTOCOL_PREFIX));
        let protocol = if offered.iter().any(|protocol| protocol == CHAT_PROTOCOL) {
            Some(CHAT_PROTOCOL.to_owned())
        } else {
            bearer_protocol.cloned()
        };
        let token = if let Some(value) = parts.headers.get(AUTHORIZATION) {
            bearer_header(value.to_str().ok())?
        } else if let Some(protocol) = bearer_protocol {
            protocol[BEARER_PROTOCOL_PREFIX.len()..].to_owned()
        } else {
            query_token(&parts.uri)?
        };
        let verified = state.auth().verify(&token).await?;
        tracing::Span::current().record("account.id", verified.account.as_str());
        Ok(Self {
            account: verified.account,
            user: verified.subject,
            protocol,
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_header(value: Option<&str>) -> Result<String, ApiError> {
    value
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim().to_owned())
        .ok_or_else(|| {
            ApiError::Unauthorized("Authorization header must be `Bearer <token>`".into())
        })
}

/// The token of the `access_token` query parameter.
fn query_token(uri: &Uri) -> Result<String, ApiError> {
    let Query(params) = Query::<SocketParams>::try_from_uri(uri)
        .map_err(|err| ApiError::bad_field("access_token", err.body_text()))?;
    params.access_token.ok_or_else(|| {
        ApiError::Unauthorized(
            "no token: send an Authorization header, a `bearer.<token>` subprotocol or `access_token`"
                .into(),
        )
    })
}
