//! Answers a repeated request from its key's stored result, marked with
//! `Idempotent-Replayed: true`: the same JSON body, or, to a client that
//! accepts `text/event-stream`, the stored `log` events and then the
//! `result` or `error` event (the chunks a generator yielded are not kept).

use std::convert::Infallible;

use axum::http::HeaderValue;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::{json_event, InvokeResult};
use crate::error::{ApiError, ApiResult};
use crate::sorted::sorted_keys;

/// The response header that marks a replay.
const REPLAYED: &str = "idempotent-replayed";

/// A stored result as it was kept.
pub(super) fn parse(result: Value) -> ApiResult<InvokeResult> {
    let mut result: InvokeResult = serde_json::from_value(result)
        .map_err(|err| ApiError::Internal(format!("stored call result: {err}")))?;
    // A stored result has an output or an error; a `null` output reads back as none.
    if result.output.is_none() && result.error.is_none() {
        result.output = Some(Value::Null);
    }
    result.output = result.output.map(sorted_keys);
    Ok(result)
}

/// `result` as the response to a repeat; as SSE if `sse`.
pub(super) fn respond(result: InvokeResult, sse: bool) -> Response {
    let mut response = match sse {
        true => Sse::new(futures::stream::iter(events(result))).into_response(),
        false => Json(result).into_response(),
    };
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

fn events(result: InvokeResult) -> Vec<Result<Event, Infallible>> {
    let mut events: Vec<_> = result
        .logs
        .iter()
        .map(|line| json_event("log", line))
        .collect();
    events.push(match &result.error {
        Some(error) => json_event("error", error),
        None => json_event(
            "result",
            &serde_json::json!({ "output": result.output.as_ref() }),
        ),
    });
    events.into_iter().map(Ok).collect()
}
