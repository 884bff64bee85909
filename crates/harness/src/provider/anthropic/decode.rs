//! Turning the Messages stream's typed events into model events: text and
//! tool-use content blocks keyed by their index, the usage of
//! `message_start` and `message_delta`, and the stop reason that closes the
//! pass; an `error` event fails it.

use std::collections::HashMap;

use serde::Deserialize;

use crate::provider::sse::Decode;
use crate::provider::{FinishReason, ModelEvent, ProviderError, Usage};

/// One event's data; its `type` repeats the event's name.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: Message,
    },
    ContentBlockStart {
        index: usize,
        content_block: Block,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {},
    MessageDelta {
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: WireError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

/// The state of one pass: the call id of each tool-use block by index, the
/// stop reason and the usage so far.
#[derive(Default)]
pub(super) struct Decoder {
    calls: HashMap<usize, String>,
    stop_reason: Option<String>,
    usage: Usage,
}

impl Decode for Decoder {
    fn event(&mut self, _name: &str, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let event: Event = serde_json::from_str(data)
            .map_err(|err| ProviderError::Protocol(format!("an event is not valid: {err}")))?;
        let mut events = Vec::new();
        match event {
            Event::MessageStart { message } => self.count(message.usage),
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                Block::Text { text } if !text.is_empty() => {
                    events.push(ModelEvent::TextDelta(text));
                }
                Block::ToolUse { id, name } => {
                    self.calls.insert(index, id.clone());
                    events.push(ModelEvent::ToolCallStart { id, name });
                }
                Block::Text { .. } | Block::Other => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                Delta::Text { text } if !text.is_empty() => {
                    events.push(ModelEvent::TextDelta(text));
                }
                Delta::InputJson { partial_json } if !partial_json.is_empty() => {
                    let id = self.calls.get(&index).cloned().ok_or_else(|| {
                        ProviderError::Protocol(format!(
                            "block {index} sent tool input before it began"
                        ))
                    })?;
                    events.push(ModelEvent::ToolCallDelta {
                        id,
                        delta: partial_json,
                    });
                }
                Delta::Text { .. } | Delta::InputJson { .. } | Delta::Other => {}
            },
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                self.count(usage);
            }
            Event::Error { error } => return Err(stream_error(error)),
            Event::ContentBlockStop {}
            | Event::MessageStop {}
            | Event::Ping {}
            | Event::Unknown => {}
        }
        Ok(events)
    }

    fn finish(&mut self) -> Result<ModelEvent, ProviderError> {
        let reason = match self.stop_reason.as_deref() {
            None => {
                return Err(ProviderError::Protocol(
                    "the stream ended without a stop reason".into(),
                ))
            }
            Some("tool_use") => FinishReason::ToolCalls,
            Some(_) if !self.calls.is_empty() => FinishReason::ToolCalls,
            Some("end_turn" | "stop_sequence") => FinishReason::Stop,
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
            Some("refusal") => FinishReason::ContentFilter,
            Some(_) => FinishReason::Other,
        };
        Ok(ModelEvent::Finish {
            reason,
            usage: self.usage,
        })
    }
}

impl Decoder {
    /// Takes the counts `usage` reports (each event reports its own, the
    /// last one the running total of output).
    fn count(&mut self, usage: Option<WireUsage>) {
        let Some(usage) = usage else { return };
        if let Some(input) = usage.input_tokens {
            self.usage.input_tokens = input;
        }
        if let Some(output) = usage.output_tokens {
            self.usage.output_tokens = output;
        }
    }
}

/// An `error` event, with the HTTP status its type stands for.
fn stream_error(error: WireError) -> ProviderError {
    let status = match error.kind.as_str() {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "overloaded_error" => 529,
        _ => {
            return ProviderError::Protocol(format!(
                "the provider reported an error: {} ({})",
                error.message, error.kind
            ))
        }
    };
    ProviderError::Status {
        status,
        message: error.message,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn decode(events: &[Value]) -> Result<Vec<ModelEvent>, ProviderError> {
        let mut decoder = Decoder::default();
        let mut out = Vec::new();
        for event in events {
            let name = event["type"].as_str().unwrap_or_default();
            out.extend(decoder.event(name, &event.to_string())?);
        }
        out.push(decoder.finish()?);
        Ok(out)
    }

    fn start() -> Value {
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}})
    }

    #[test]
    fn text_then_parallel_tool_calls() {
        let events = decode(&[
            start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me look"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "weather", "input": {}}}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_b", "name": "time", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Oslo\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 42}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::TextDelta("Let me look".into()),
                ModelEvent::ToolCallStart {
                    id: "toolu_a".into(),
                    name: "weather".into()
                },
                ModelEvent::ToolCallStart {
                    id: "toolu_b".into(),
                    name: "time".into()
                },
                ModelEvent::ToolCallDelta {
                    id: "toolu_a".into(),
                    delta: "{\"city\":".into()
                },
                ModelEvent::ToolCallDelta {
                    id: "toolu_b".into(),
                    delta: "{}".into()
                },
                ModelEvent::ToolCallDelta {
                    id: "toolu_a".into(),
                    delta: "\"Oslo\"}".into()
                },
                ModelEvent::Finish {
                    reason: FinishReason::ToolCalls,
                    usage: Usage {
                        input_tokens: 25,
                        output_tokens: 42
                    }
                },
            ]
        );
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        let cases = [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("refusal", FinishReason::ContentFilter),
            ("pause_turn", FinishReason::Other),
        ];
        for (stop_reason, expected) in cases {
            let events = decode(&[
                start(),
                json!({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 3}}),
            ])
            .unwrap();
            assert!(
                matches!(events.last(), Some(ModelEvent::Finish { reason, .. }) if *reason == expected),
                "{stop_reason}: {events:?}"
            );
        }
    }

    #[test]
    fn errors_and_broken_streams() {
        let err = decode(&[
            start(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ])
        .unwrap_err();
        assert!(
            matches!(&err, ProviderError::Status { status: 529, message } if message == "Overloaded"),
            "{err}"
        );
        let broken: [&[Value]; 2] = [
            &[start()],
            &[
                start(),
                json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{"}}),
            ],
        ];
        for events in broken {
            let err = decode(events).unwrap_err();
            assert!(matches!(err, ProviderError::Protocol(_)), "{err}");
        }
        let mut decoder = Decoder::default();
        assert!(matches!(
            decoder.event("message", "not json"),
            Err(ProviderError::Protocol(_))
        ));
    }

    #[test]
    fn unknown_events_and_blocks_are_skipped() {
        let events = decode(&[
            start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "x"}}),
            json!({"type": "some_future_event"}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ])
        .unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
    }
}
