//! `/mcp` takes the API's bearer JWT. Without an acceptable one the answer
//! is 401 with `WWW-Authenticate` naming the OAuth protected-resource
//! metadata (RFC 9728), which names the authorization server(s) that issue
//! tokens for this server, so MCP clients that do OAuth discovery find it.
//! With none configured it names this server's own origin, since the
//! document must name one.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use toolserver_domain::AccountId;

use crate::auth::Account;
use crate::state::AppState;

/// Where the protected-resource metadata is served.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The account an MCP request speaks for, put in the request's extensions.
#[derive(Debug, Clone)]
pub struct McpCaller(pub AccountId);

/// Checks the bearer token and passes the request on with its account, or
/// answers 401 with the metadata's address.
pub async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    match Account::from_request_parts(&mut parts, &state).await {
        Ok(Account(account)) => {
            parts.extensions.insert(McpCaller(account));
            next.run(Request::from_parts(parts, body)).await
        }
        Err(err) => {
            let had_token = parts.headers.contains_key(header::AUTHORIZATION);
            let mut response = err.into_response();
            let challenge = challenge(&state, had_token);
            if let Ok(value) = HeaderValue::from_str(&challenge) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            response
        }
    }
}

/// The `WWW-Authenticate` challenge of a refused request.
fn challenge(state: &AppState, had_token: bool) -> String {
    let metadata = public(state, &format!("{METADATA_PATH}/mcp"));
    match had_token {
        true => format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\""),
        false => format!("Bearer resource_metadata=\"{metadata}\""),
    }
}

/// `GET /.well-known/oauth-protected-resource/mcp`: the metadata of `/mcp`,
/// the resource a client discovers from `/mcp`'s challenge.
pub async fn endpoint_metadata(State(state): State<AppState>) -> Json<Value> {
    Json(metadata(&state, public(&state, "/mcp")))
}

/// `GET /.well-known/oauth-protected-resource`: the metadata of the server
/// as a whole, whose resource is its public URL (its origin), as RFC 9728
/// §3.3 has it for a well-known URL without a path suffix.
pub async fn origin_metadata(State(state): State<AppState>) -> Json<Value> {
    Json(metadata(&state, public(&state, "")))
}

/// The metadata document of `resource`: its authorization servers are the
/// configured ones, or this server's own origin (MCP's authorization spec
/// requires at least one).
fn metadata(state: &AppState, resource: String) -> Value {
    let configured = &state.settings().mcp.authorization_servers;
    let servers = match configured.is_empty() {
        true => vec![origin(state)],
        false => configured.clone(),
    };
    json!({
        "resource": resource,
        "resource_name": "toolserver",
        "authorization_servers": servers,
        "bearer_methods_supported": ["header"],
    })
}

/// `path` on this server's public URL.
fn public(state: &AppState, path: &str) -> String {
    let base = state.harness().settings().public_url.as_str();
    format!("{}{path}", base.trim_end_matches('/'))
}

/// This server's public origin (`scheme://host[:port]`).
fn origin(state: &AppState) -> String {
    state
        .harness()
        .settings()
        .public_url
        .origin()
        .ascii_serialization()
}
