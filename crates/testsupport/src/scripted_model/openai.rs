//! The OpenAI Chat Completions streaming format: `POST /v1/chat/completions`.

use serde_json::{json, Value};

use super::frame::Frame;
use super::reply::Streamed;
use super::PROMPT_TOKENS;

/// The step of a request: assistant messages after the last user message.
pub(super) fn step(request: &Value) -> usize {
    let messages = request["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let after_user = messages
        .iter()
        .rposition(|message| message["role"] == "user")
        .map_or(0, |last| last + 1);
    messages[after_user..]
        .iter()
        .filter(|message| message["role"] == "assistant")
        .count()
}

/// The `{"error": {"message": …}}` body.
pub(super) fn error_body(message: &str) -> Value {
    json!({"error": {"message": message, "type": "scripted_error"}})
}

/// The role chunk, one chunk per delta, the finish chunk, the usage chunk
/// and `[DONE]`.
pub(super) fn frames(streamed: &Streamed, model: &str) -> Vec<Frame> {
    let mut deltas: Vec<Value> = streamed
        .words()
        .map(|word| json!({"content": word}))
        .collect();
    for (index, call) in streamed.calls.iter().enumerate() {
        deltas.push(json!({"tool_calls": [{
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]}));
        for piece in call.pieces() {
            deltas
                .push(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}));
        }
    }
    let natural = if streamed.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let finish = streamed.finish_reason.as_deref().unwrap_or(natural);
    let choice = |delta: Value, finish: Option<&str>| {
        chunk(
            model,
            json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
        )
    };
    let mut chunks = vec![choice(json!({"role": "assistant", "content": ""}), None)];
    chunks.extend(deltas.into_iter().map(|delta| choice(delta, None)));
    chunks.push(choice(json!({}), Some(finish)));
    let completion_tokens = streamed.output_tokens();
    let mut usage = chunk(model, json!([]));
    usage["usage"] = json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": completion_tokens,
        "total_tokens": PROMPT_TOKENS + completion_tokens,
    });
    chunks.push(usage);
    let mut frames: Vec<Frame> = chunks.iter().map(Frame::data).collect();
    frames.push(Frame {
        event: None,
        data: "[DONE]".to_owned(),
    });
    frames
}

fn chunk(model: &str, choices: Value) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": choices,
    })
}
