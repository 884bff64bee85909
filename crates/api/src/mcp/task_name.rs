//! `tasks/get`, `tasks/update` and `tasks/cancel` name their task in
//! `params.taskId`. The tasks extension has clients mirror it in the
//! `Mcp-Name` header so that intermediaries can route a poll to the
//! instance holding the task; the transport requires that header only of
//! `tools/call`, `resources/read` and `prompts/get`. No process here holds a
//! task (any process answers for any task), so a task request without the
//! header is taken as its body names it: the header is filled in from
//! `params.taskId` before the MCP library checks it. A header that is there
//! is still checked against the body, and a mismatch refused (`-32020`).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// The methods whose `Mcp-Name` is their `params.taskId`.
const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// Fills in `Mcp-Name` of a task request that has none from its body.
pub async fn name_tasks(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let unnamed = request.method() == Method::POST
        && !request.headers().contains_key(MCP_NAME)
        && request
            .headers()
            .get(MCP_METHOD)
            .and_then(|method| method.to_str().ok())
            .is_some_and(|method| TASK_METHODS.contains(&method));
    if !unnamed {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let limit = state.settings().max_request_bytes;
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return ApiError::PayloadTooLarge(format!("the request body exceeds {limit} bytes"))
            .into_response();
    };
    if let Some(value) = task_id(&bytes).as_deref().and_then(header_value) {
        parts.headers.insert(MCP_NAME, value);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The `params.taskId` of a task request's body.
fn task_id(body: &[u8]) -> Option<String> {
    let request: Value = serde_json::from_slice(body).ok()?;
    let method = request.get("method")?.as_str()?;
    if !TASK_METHODS.contains(&method) {
        return None;
    }
    Some(request.get("params")?.get("taskId")?.as_str()?.to_owned())
}

/// `name` as the transport encodes a header value: as it is when it is
/// plain visible ASCII, else in the `=?base64?…?=` form.
fn header_value(name: &str) -> Option<HeaderValue> {
    let padded = name.starts_with([' ', '\t']) || name.ends_with([' ', '\t']);
    let printable = name.bytes().all(|byte| (0x20..0x7f).contains(&byte));
    let sentinel = name.starts_with("=?base64?") && name.ends_with("?=");
    let plain = printable && !padded && !sentinel;
    let encoded = match plain {
        true => name.to_owned(),
        false => format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(name)
        ),
    };
    HeaderValue::from_str(&encoded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_request_body_gives_its_task_id() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t-1"}}"#;
        assert_eq!(task_id(body).as_deref(), Some("t-1"));
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"taskId":"t-1"}}"#;
        assert_eq!(task_id(call), None);
        assert_eq!(task_id(b"not json"), None);
    }

    #[test]
    fn a_name_outside_plain_ascii_is_base64_encoded() {
        assert_eq!(header_value("0190-ab").unwrap(), "0190-ab");
        assert_eq!(header_value("tâche").unwrap(), "=?base64?dMOiY2hl?=");
        assert_eq!(header_value(" x").unwrap(), "=?base64?IHg=?=");
        assert_eq!(
            header_value("=?base64?x?=").unwrap(),
            "=?base64?PT9iYXNlNjQ/eD89?="
        );
    }
}
