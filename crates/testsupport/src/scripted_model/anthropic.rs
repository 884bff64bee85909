//! The Anthropic Messages streaming format: `POST /v1/messages`, answered
//! with named server-sent events (`message_start`, content blocks,
//! `message_delta`, `message_stop`).

use serde_json::{json, Value};

use super::frame::Frame;
use super::reply::Streamed;
use super::PROMPT_TOKENS;

/// The step of a request: assistant messages after the user's last own
/// turn. Tool results come back as user messages holding only
/// `tool_result` blocks, which are no turn of the user's.
pub(super) fn step(request: &Value) -> usize {
    let messages = request["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let after_user = messages
        .iter()
        .rposition(is_user_turn)
        .map_or(0, |last| last + 1);
    messages[after_user..]
        .iter()
        .filter(|message| message["role"] == "assistant")
        .count()
}

fn is_user_turn(message: &Value) -> bool {
    message["role"] == "user"
        && match &message["content"] {
            Value::String(_) => true,
            Value::Array(blocks) => blocks.iter().any(|block| block["type"] != "tool_result"),
            _ => false,
        }
}

/// The `{"type": "error", "error": {type, message}}` body, its type named
/// after `status`.
pub(super) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// `message_start`; a text block (words as `text_delta`s) unless the reply
/// is only tool calls, with a `ping` after the first block's start; a
/// `tool_use` block per call (its arguments as two `input_json_delta`s);
/// `message_delta` with the stop reason and usage; `message_stop`.
pub(super) fn frames(streamed: &Streamed, model: &str) -> Vec<Frame> {
    let mut events = vec![json!({
        "type": "message_start",
        "message": {
            "id": "msg_scripted",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": model,
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": 1},
        },
    })];
    let mut blocks: Vec<(Value, Vec<Value>)> = Vec::new();
    if !streamed.text.is_empty() || streamed.calls.is_empty() {
        let deltas = streamed
            .words()
            .map(|word| json!({"type": "text_delta", "text": word}))
            .collect();
        blocks.push((json!({"type": "text", "text": ""}), deltas));
    }
    for call in &streamed.calls {
        let deltas = call
            .pieces()
            .into_iter()
            .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
            .collect();
        let start = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
        blocks.push((start, deltas));
    }
    for (index, (block, deltas)) in blocks.into_iter().enumerate() {
        events.push(json!({"type": "content_block_start", "index": index, "content_block": block}));
        if index == 0 {
            events.push(json!({"type": "ping"}));
        }
        events.extend(
            deltas.into_iter().map(
                |delta| json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ),
        );
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.push(json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(streamed), "stop_sequence": null},
        "usage": {"output_tokens": streamed.output_tokens()},
    }));
    events.push(json!({"type": "message_stop"}));
    events.iter().map(Frame::typed).collect()
}

/// `end_turn` or `tool_use`, or the reply's own reason (`length` is
/// `max_tokens` here).
fn stop_reason(streamed: &Streamed) -> &str {
    match streamed.finish_reason.as_deref() {
        Some("length") => "max_tokens",
        Some(reason) => reason,
        None if streamed.calls.is_empty() => "end_turn",
        None => "tool_use",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_are_no_turn_of_the_users() {
        let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "echo", "input": {}}]});
        let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]});
        let asked = json!({"role": "user", "content": [{"type": "text", "text": "again"}]});
        let hi = json!({"role": "user", "content": "hi"});
        let request = |messages: Value| json!({"messages": messages});
        assert_eq!(step(&request(json!([hi]))), 0);
        assert_eq!(step(&request(json!([hi, call, result]))), 1);
        assert_eq!(step(&request(json!([hi, call, result, call, result]))), 2);
        assert_eq!(step(&request(json!([hi, call, result, asked]))), 0);
    }
}
