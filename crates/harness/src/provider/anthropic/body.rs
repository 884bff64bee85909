//! The JSON body of a streaming Messages request: the system prompt apart,
//! the conversation as alternating user and assistant messages of content
//! blocks (tool results go back as user messages), and the tools.

use serde_json::{json, Map, Value};

use crate::provider::turns::{arguments_object, merged_by_role};
use crate::provider::{ChatMessage, ModelRequest, ToolSpec};

/// Output tokens asked for when the agent sets no `maxOutputTokens` (the API
/// requires a limit).
pub(super) const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Agent-config generation options and their Messages names; other options
/// (`seed`) are not sent.
const OPTIONS: [(&str, &str); 3] = [
    ("temperature", "temperature"),
    ("topP", "top_p"),
    ("maxOutputTokens", "max_tokens"),
];

/// The body for `request`.
pub(super) fn body(request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model_id));
    body.insert("stream".into(), json!(true));
    body.insert("max_tokens".into(), json!(DEFAULT_MAX_TOKENS));
    if let Some(system) = &request.system {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages(&request.messages)));
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

/// The conversation as messages of content blocks, consecutive blocks of one
/// role merged into one message (the API wants the roles to alternate).
fn messages(history: &[ChatMessage]) -> Vec<Value> {
    merged_by_role(history.iter().map(blocks))
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// The role and content blocks of one message.
fn blocks(message: &ChatMessage) -> (&'static str, Vec<Value>) {
    match message {
        ChatMessage::User { content } => ("user", vec![text(content)]),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let said = Some(content).filter(|content| !content.is_empty());
            let calls = tool_calls.iter().map(|call| {
                json!({
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": arguments_object(&call.arguments),
                })
            });
            (
                "assistant",
                said.map(|said| text(said))
                    .into_iter()
                    .chain(calls)
                    .collect(),
            )
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => (
            "user",
            vec![json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": content})],
        ),
    }
}

fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn tool(tool: &ToolSpec) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.parameters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn request(messages: Vec<ChatMessage>) -> ModelRequest {
        ModelRequest {
            model_id: "claude".into(),
            system: Some("be brief".into()),
            messages,
            tools: vec![ToolSpec {
                name: "echo".into(),
                description: "echoes".into(),
                parameters: json!({"type": "object"}),
            }],
            provider_tools: Vec::new(),
            options: Map::from_iter([
                ("maxOutputTokens".to_owned(), json!(100)),
                ("seed".to_owned(), json!(7)),
                ("temperature".to_owned(), json!(0.5)),
            ]),
            idempotency_key: None,
        }
    }

    #[test]
    fn tool_results_of_one_pass_share_one_user_message() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "echo".into(),
            arguments: r#"{"q":1}"#.into(),
            provider_metadata: None,
        };
        let body = body(&request(vec![
            ChatMessage::User {
                content: "hi".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![call("a"), call("b")],
            },
            ChatMessage::Tool {
                tool_call_id: "a".into(),
                content: "1".into(),
            },
            ChatMessage::Tool {
                tool_call_id: "b".into(),
                content: "2".into(),
            },
            ChatMessage::Assistant {
                content: "done".into(),
                tool_calls: Vec::new(),
            },
        ]));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "a", "name": "echo", "input": {"q": 1}},
                    {"type": "tool_use", "id": "b", "name": "echo", "input": {"q": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                    {"type": "tool_result", "tool_use_id": "b", "content": "2"},
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
            ])
        );
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["temperature"], 0.5);
        assert!(body.get("seed").is_none());
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn empty_passes_are_left_out_and_bad_arguments_go_back_empty() {
        let mut request = request(vec![
            ChatMessage::User {
                content: "hi".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: Vec::new(),
            },
            ChatMessage::User {
                content: "again".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "echo".into(),
                    arguments: "{not json".into(),
                    provider_metadata: None,
                }],
            },
        ]);
        request.options.clear();
        let body = body(&request);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0]["content"].as_array().unwrap().len(), 2);
        assert_eq!(messages[1]["content"][0]["input"], json!({}));
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    }
}
