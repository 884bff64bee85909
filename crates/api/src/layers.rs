//! Cross-cutting HTTP layers: CORS, request ids, the request span, request
//! metrics, error logging, the request timeout, the URL and body size limits,
//! JSON error bodies, and closing a connection an error left a body on.

use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderName;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use opentelemetry_http::HeaderExtractor;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::cors::CorsSettings;
use crate::edge;
use crate::error::{ApiError, ErrorCause};
use crate::unread_body::close_after_unread_body;

/// The header carrying the request id, taken from the client or generated.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The bounds the layers enforce.
#[derive(Debug, Clone, Copy)]
pub struct EdgeLimits {
    /// Longest time a request may take to produce its response head.
    pub request_timeout: Duration,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Longest URL (path and query), in bytes.
    pub max_uri_bytes: usize,
}

/// Wraps `router` in the standard layers (outermost first: CORS when
/// configured, request id, span, request metrics, logging, JSON error
/// bodies, closing after an unread body, URL checks, timeout, body limit).
pub fn apply(router: Router, limits: EdgeLimits, cors: Option<&CorsSettings>) -> Router {
    let EdgeLimits {
        request_timeout,
        max_body_bytes,
        max_uri_bytes,
    } = limits;
    let router = router
        .fallback(edge::no_such_route)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn(move |req, next| {
            enforce_timeout(request_timeout, req, next)
        }))
        .layer(middleware::from_fn(move |req, next| {
            edge::refuse_unusable_uri(max_uri_bytes, req, next)
        }))
        .layer(middleware::from_fn(close_after_unread_body))
        .layer(middleware::from_fn(edge::json_error_bodies))
        .layer(middleware::from_fn(log_outcome))
        .layer(middleware::from_fn(crate::metrics::record_request))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid));
    match cors {
        Some(cors) => router.layer(cors.layer()),
        None => router,
    }
}

fn request_span(req: &Request) -> tracing::Span {
    let request_id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let span = tracing::info_span!(
        "request",
        request_id,
        method = %req.method(),
        path = req.uri().path(),
        account.id = tracing::field::Empty,
    );
    // A caller's W3C `traceparent` makes this request part of its trace.
    let caller = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(req.headers()))
    });
    let _ = span.set_parent(caller);
    span
}

async fn enforce_timeout(limit: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout.into_response(),
    }
}

/// Logs each response once: 5xx at error with its cause, others at debug.
async fn log_outcome(req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    let status = response.status().as_u16();
    let duration_ms = started.elapsed().as_millis() as u64;
    match response.extensions().get::<ErrorCause>() {
        Some(ErrorCause(cause)) if response.status().is_server_error() => {
            tracing::error!(status, duration_ms, cause = %cause, "request failed");
        }
        _ => tracing::info!(status, duration_ms, "request finished"),
    }
    response
}
