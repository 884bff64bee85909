//! A real HTTP API on loopback for HTTP tools to call: it answers with
//! what it received (method, path, query, chosen headers, body), fails on
//! demand, answers a large body, and serves files (OpenAPI documents).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::{Json, Router};
use serde_json::{json, Value};

/// The one credential `/auth` takes.
pub const TOKEN: &str = "tok-3f9a-very-secret-value";

/// The upstream, served until the test ends.
pub struct Upstream {
    addr: SocketAddr,
    _server: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Starts it on an ephemeral loopback port, serving `files` by name
    /// under `/files/`.
    pub async fn start(files: Vec<(&'static str, String)>) -> Self {
        let files: BTreeMap<&'static str, String> = files.into_iter().collect();
        let app = Router::new()
            .route("/echo/{*rest}", any(echo))
            .route(
                "/fail",
                get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded") }),
            )
            .route(
                "/busy",
                get(|| async {
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "2")],
                        "slow down",
                    )
                }),
            )
            .route(
                "/auth",
                get(
                    |headers: HeaderMap, Query(query): Query<Vec<(String, String)>>| async move {
                        let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
                        let authorized = bearer == Some(&format!("Bearer {TOKEN}"))
                            && query
                                .iter()
                                .all(|(name, value)| name != "key" || value == TOKEN);
                        let status = if authorized {
                            StatusCode::OK
                        } else {
                            StatusCode::UNAUTHORIZED
                        };
                        (
                            status,
                            Json(json!({"authorized": authorized, "youSent": bearer})),
                        )
                    },
                ),
            )
            .route("/big", get(|| async { "x".repeat(64 * 1024) }))
            .route("/text", get(|| async { "plain words" }))
            .route(
                "/files/{name}",
                get(move |Path(name): Path<String>| {
                    let files = files.clone();
                    async move {
                        match files.get(name.as_str()) {
                            Some(text) => (StatusCode::OK, text.clone()).into_response(),
                            None => StatusCode::NOT_FOUND.into_response(),
                        }
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            _server: server,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://localhost:<port>`: a host name, which the public-only
    /// resolver refuses.
    pub fn named_base(&self) -> String {
        format!("http://localhost:{}", self.addr.port())
    }
}

/// Everything the request carried, as JSON.
async fn echo(
    method: Method,
    Path(rest): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    Json(json!({
        "method": method.as_str(),
        "path": format!("/{rest}"),
        "query": query,
        "authorization": header("authorization"),
        "apiKey": header("x-api-key"),
        "contentType": header("content-type"),
        "body": body,
        "items": [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}],
    }))
}
