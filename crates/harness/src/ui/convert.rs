//! Stored UI messages to model-facing history. Each model pass of an
//! assistant message (split at `step-start`) becomes one assistant message
//! with its text and its settled tool calls, followed by one tool message per
//! call. Calls without an outcome yet (waiting for approval, or cut off) are
//! left out, so every tool call the model sees has its answer.

use serde_json::{json, Value};

use super::{ToolPart, ToolState, UiMessage, UiPart};
use crate::provider::{ChatMessage, ToolCall};

/// The model-facing history of `messages`.
pub fn to_model_history<'a>(messages: impl IntoIterator<Item = &'a UiMessage>) -> Vec<ChatMessage> {
    let mut history = Vec::new();
    for message in messages {
        match message.role.as_str() {
            "user" => {
                let text = message.text();
                if !text.is_empty() {
                    history.push(ChatMessage::User { content: text });
                }
            }
            "assistant" => push_assistant(&mut history, message),
            _ => {}
        }
    }
    history
}

fn push_assistant(history: &mut Vec<ChatMessage>, message: &UiMessage) {
    let mut steps: Vec<Vec<&UiPart>> = vec![Vec::new()];
    for part in &message.parts {
        match part {
            UiPart::StepStart => steps.push(Vec::new()),
            other => {
                if let Some(step) = steps.last_mut() {
                    step.push(other);
                }
            }
        }
    }
    for step in steps {
        let text: String = step
            .iter()
            .filter_map(|part| match part {
                UiPart::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let settled: Vec<&ToolPart> = step
            .iter()
            .filter_map(|part| match part {
                UiPart::Tool(tool) if tool.is_settled() => Some(&**tool),
                _ => None,
            })
            .collect();
        if text.is_empty() && settled.is_empty() {
            continue;
        }
        history.push(ChatMessage::Assistant {
            content: text,
            tool_calls: settled
                .iter()
                .map(|tool| ToolCall {
                    id: tool.tool_call_id.clone(),
                    name: tool.tool_name.clone(),
                    arguments: tool
                        .input
                        .as_ref()
                        .map_or_else(|| "{}".to_owned(), Value::to_string),
                    provider_metadata: tool.call_provider_metadata.clone(),
                })
                .collect(),
        });
        for tool in settled {
            history.push(ChatMessage::Tool {
                tool_call_id: tool.tool_call_id.clone(),
                content: tool_result_text(tool),
            });
        }
    }
}

/// What the model is told about a settled call.
fn tool_result_text(tool: &ToolPart) -> String {
    match tool.state {
        ToolState::OutputAvailable => tool.output.clone().unwrap_or(Value::Null).to_string(),
        ToolState::OutputDenied => {
            let reason = tool.approval.as_ref().and_then(|a| a.reason.clone());
            json!({"error": "the user denied this tool call", "reason": reason}).to_string()
        }
        _ => json!({"error": tool.error_text.clone().unwrap_or_default()}).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_become_calls_followed_by_their_results() {
        let messages: Vec<UiMessage> = serde_json::from_value(json!([
            {"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
            {"id": "a", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-echo", "toolCallId": "c1", "state": "output-available", "input": {"q": 1}, "output": {"ok": 1}},
                {"type": "tool-echo", "toolCallId": "c2", "state": "output-error", "input": {}, "errorText": "bad"},
                {"type": "tool-echo", "toolCallId": "c3", "state": "approval-requested", "input": {}, "approval": {"id": "x"}},
                {"type": "step-start"},
                {"type": "text", "text": "done", "state": "done"},
            ]},
        ]))
        .unwrap();
        let history = to_model_history(&messages);
        assert_eq!(history.len(), 5, "{history:?}");
        let ChatMessage::Assistant { tool_calls, .. } = &history[1] else {
            panic!()
        };
        assert_eq!(
            tool_calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["c1", "c2"]
        );
        assert_eq!(
            history[2],
            ChatMessage::Tool {
                tool_call_id: "c1".into(),
                content: "{\"ok\":1}".into()
            }
        );
        assert_eq!(
            history[3],
            ChatMessage::Tool {
                tool_call_id: "c2".into(),
                content: "{\"error\":\"bad\"}".into()
            }
        );
        assert_eq!(
            history[4],
            ChatMessage::Assistant {
                content: "done".into(),
                tool_calls: vec![]
            }
        );
    }
}
