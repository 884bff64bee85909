//! The JSON body of a `streamGenerateContent` request: the conversation as
//! `user` and `model` contents of parts (tool results go back as function
//! responses named after the call they answer), the system instruction, the
//! function declarations and provider-defined tools, and the generation
//! config.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::provider::turns::{arguments_object, merged_by_role};
use crate::provider::{ChatMessage, ModelRequest, ToolSpec};

/// Agent-config generation options, which Gemini names alike.
const OPTIONS: [&str; 4] = ["temperature", "topP", "maxOutputTokens", "seed"];

/// The body for `request`.
pub(super) fn body(request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents(&request.messages)));
    if let Some(system) = &request.system {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    let mut tools = Vec::new();
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request.tools.iter().map(declaration).collect();
        tools.push(json!({"functionDeclarations": declarations}));
    }
    tools.extend(
        request
            .provider_tools
            .iter()
            .map(|name| json!({ name.as_str(): {} })),
    );
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    let config: Map<String, Value> = OPTIONS
        .iter()
        .filter_map(|&option| Some((option.to_owned(), request.options.get(option)?.clone())))
        .collect();
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

/// The conversation as contents, consecutive parts of one role merged into
/// one content (the results of one pass's calls answer it together).
fn contents(history: &[ChatMessage]) -> Vec<Value> {
    let names: HashMap<&str, &str> = history
        .iter()
        .flat_map(|message| match message {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls.as_slice(),
            _ => &[],
        })
        .map(|call| (call.id.as_str(), call.name.as_str()))
        .collect();
    merged_by_role(history.iter().map(|message| parts(message, &names)))
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

/// The role and parts of one message; `names` gives each call's tool name.
fn parts(message: &ChatMessage, names: &HashMap<&str, &str>) -> (&'static str, Vec<Value>) {
    match message {
        ChatMessage::User { content } => ("user", vec![json!({"text": content})]),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let said = Some(content).filter(|content| !content.is_empty());
            let calls = tool_calls.iter().map(|call| {
                let mut part =
                    json!({"functionCall": {"name": call.name, "args": arguments_object(&call.arguments)}});
                let signature = call
                    .provider_metadata
                    .as_ref()
                    .and_then(|metadata| metadata.pointer("/google/thoughtSignature"));
                if let Some(signature) = signature.filter(|s| s.is_string()) {
                    part["thoughtSignature"] = signature.clone();
                }
                part
            });
            let text = said.map(|said| json!({"text": said}));
            ("model", text.into_iter().chain(calls).collect())
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => {
            let name = names
                .get(tool_call_id.as_str())
                .copied()
                .unwrap_or_default();
            let response = match serde_json::from_str::<Value>(content) {
                Ok(Value::Object(object)) => Value::Object(object),
                Ok(other) => json!({"result": other}),
                Err(_) => json!({"result": content}),
            };
            (
                "user",
                vec![json!({"functionResponse": {"name": name, "response": response}})],
            )
        }
    }
}

/// A function declaration; its parameters go as JSON Schema, which the API
/// takes whole (`parameters` would want its OpenAPI subset).
fn declaration(tool: &ToolSpec) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "parametersJsonSchema": tool.parameters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    #[test]
    fn results_answer_by_name_signatures_go_back_and_options_pass_through() {
        let call = |id: &str, name: &str| ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: r#"{"q":1}"#.into(),
            provider_metadata: (name == "weather")
                .then(|| json!({"google": {"thoughtSignature": "c2ln"}})),
        };
        let request = ModelRequest {
            model_id: "gemini".into(),
            system: Some("be brief".into()),
            messages: vec![
                ChatMessage::User {
                    content: "hi".into(),
                },
                ChatMessage::Assistant {
                    content: "looking".into(),
                    tool_calls: vec![call("a", "weather"), call("b", "time")],
                },
                ChatMessage::Tool {
                    tool_call_id: "a".into(),
                    content: r#"{"temp":3}"#.into(),
                },
                ChatMessage::Tool {
                    tool_call_id: "b".into(),
                    content: "\"noon\"".into(),
                },
            ],
            tools: vec![ToolSpec {
                name: "weather".into(),
                description: "weather".into(),
                parameters: json!({"type": "object", "additionalProperties": false}),
            }],
            provider_tools: vec!["googleSearch".into()],
            options: Map::from_iter([
                ("topP".to_owned(), json!(0.9)),
                ("seed".to_owned(), json!(7)),
            ]),
            idempotency_key: None,
        };
        let body = body(&request);
        assert_eq!(
            body["contents"],
            json!([
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [
                    {"text": "looking"},
                    {"functionCall": {"name": "weather", "args": {"q": 1}}, "thoughtSignature": "c2ln"},
                    {"functionCall": {"name": "time", "args": {"q": 1}}},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "weather", "response": {"temp": 3}}},
                    {"functionResponse": {"name": "time", "response": {"result": "noon"}}},
                ]},
            ])
        );
        assert_eq!(
            body["systemInstruction"],
            json!({"parts": [{"text": "be brief"}]})
        );
        assert_eq!(
            body["tools"],
            json!([
                {"functionDeclarations": [{"name": "weather", "description": "weather", "parametersJsonSchema": {"type": "object", "additionalProperties": false}}]},
                {"googleSearch": {}},
            ])
        );
        assert_eq!(body["generationConfig"], json!({"topP": 0.9, "seed": 7}));
    }

    #[test]
    fn a_bare_request_sends_only_its_contents() {
        let request = ModelRequest {
            model_id: "gemini".into(),
            system: None,
            messages: vec![ChatMessage::User {
                content: "hi".into(),
            }],
            tools: Vec::new(),
            provider_tools: Vec::new(),
            options: Map::new(),
            idempotency_key: None,
        };
        assert_eq!(
            body(&request),
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
        );
    }
}
