//! The JSON body of a streaming Chat Completions request.

use serde_json::{json, Map, Value};

use crate::provider::{ChatMessage, ModelRequest, ToolCall, ToolSpec};

/// Agent-config generation options and their Chat Completions names; other
/// options are not sent.
const OPTIONS: [(&str, &str); 4] = [
    ("temperature", "temperature"),
    ("topP", "top_p"),
    ("maxOutputTokens", "max_completion_tokens"),
    ("seed", "seed"),
];

/// The body for `request`, asking for a stream that ends with usage.
pub(super) fn body(request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model_id));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert("messages".into(), Value::Array(messages(request)));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(tool).collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    for (option, wire) in OPTIONS {
        if let Some(value) = request.options.get(option) {
            body.insert(wire.into(), value.clone());
        }
    }
    Value::Object(body)
}

/// The system prompt first, then the conversation.
fn messages(request: &ModelRequest) -> Vec<Value> {
    let system = request
        .system
        .iter()
        .map(|system| json!({"role": "system", "content": system}));
    system.chain(request.messages.iter().map(message)).collect()
}

fn message(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::User { content } => json!({"role": "user", "content": content}),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } if tool_calls.is_empty() => json!({"role": "assistant", "content": content}),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => json!({
            "role": "assistant",
            "content": if content.is_empty() { Value::Null } else { json!(content) },
            "tool_calls": tool_calls.iter().map(tool_call).collect::<Vec<_>>(),
        }),
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
}

fn tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

fn tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    })
}
