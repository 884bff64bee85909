//! The request edge: URLs no route can take are refused before routing, and
//! every error answer carries the JSON error body, including the ones axum
//! writes itself (unknown route, wrong method, a path that is not UTF-8).

use axum::body::to_bytes;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use toolserver_domain::validation::abbreviate;

use crate::error::{code_for_status, ApiError, ErrorBody, ErrorDetail};

/// Longest plain-text error body rewritten into JSON; longer ones are cut.
const MAX_REWRITTEN_TEXT: usize = 4096;

/// Refuses a URL longer than `max_uri_bytes` (414) or a path carrying an
/// encoded NUL (400): no stored text can hold U+0000, so no path names
/// anything with one. (Query values are all parsed into numbers, ids or
/// hex, which a NUL fails on its own.)
pub async fn refuse_unusable_uri(max_uri_bytes: usize, req: Request, next: Next) -> Response {
    let uri = req.uri();
    let length = uri.path_and_query().map_or(0, |pq| pq.as_str().len());
    if length > max_uri_bytes {
        return error_response(
            StatusCode::URI_TOO_LONG,
            format!("the URL is {length} bytes; the limit is {max_uri_bytes}"),
        );
    }
    if uri.path().to_ascii_lowercase().contains("%00") {
        return ApiError::BadRequest {
            field: None,
            message: "the URL path contains an encoded NUL character (%00)".into(),
        }
        .into_response();
    }
    next.run(req).await
}

/// Gives an error response that is not JSON (written by axum or hyper
/// layers rather than by a handler) the JSON error body, keeping its status
/// and headers (`Allow` on a 405, say).
pub async fn json_error_bodies(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match to_bytes(body, MAX_REWRITTEN_TEXT * 4).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_lowercase()
    } else {
        abbreviate(&text, MAX_REWRITTEN_TEXT)
    };
    let rewritten = error_response(status, message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, rewritten.into_body())
}

/// The answer for a path no route serves.
pub async fn no_such_route() -> Response {
    error_response(StatusCode::NOT_FOUND, "no such route".into())
}

fn error_response(status: StatusCode, message: String) -> Response {
    let body = ErrorBody {
        error: ErrorDetail {
            code: code_for_status(status).to_owned(),
            message,
            field: None,
            limit: None,
            value: None,
            retry_after_ms: None,
        },
    };
    (status, Json(body)).into_response()
}
