//! The API server's answers every fake resource shares: `metav1.Status`
//! failures and the time stamps it writes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// A `metav1.Status` failure response.
pub(super) fn failure(code: StatusCode, reason: &str, message: &str, details: Value) -> Response {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if !details.is_null() {
        status["details"] = details;
    }
    (code, Json(status)).into_response()
}

/// The 404 for the object `name` of the resource `plural`.
pub(super) fn not_found(plural: &str, name: &str) -> Response {
    let message = format!("{plural} \"{name}\" not found");
    let details = json!({"name": name, "kind": plural});
    failure(StatusCode::NOT_FOUND, "NotFound", &message, details)
}

/// A 400 with `message`.
pub(super) fn bad_request(message: &str) -> Response {
    failure(StatusCode::BAD_REQUEST, "BadRequest", message, Value::Null)
}

/// The 404 for a resource the fake cluster does not serve.
pub(super) fn unknown_resource() -> Response {
    let message = "the server could not find the requested resource";
    failure(StatusCode::NOT_FOUND, "NotFound", message, Value::Null)
}

/// Answers paths the fake cluster does not serve.
pub(super) async fn unknown() -> Response {
    unknown_resource()
}

/// Now, to the second, as the API server writes times.
pub(super) fn now() -> String {
    let now = OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&Rfc3339)
        .unwrap_or_default()
}
