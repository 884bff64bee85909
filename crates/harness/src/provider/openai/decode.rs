//! Turning `chat.completion.chunk`s into model events: text deltas, tool
//! calls keyed by their index, and the finish reason and usage that close the
//! pass.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::provider::sse::Decode;
use crate::provider::{FinishReason, ModelEvent, ProviderError, Usage};

/// One `data:` chunk. Fields a server leaves out or sends as `null` are
/// taken as absent.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// The state of one pass: the id of each tool call by index, and the last
/// finish reason and usage seen.
#[derive(Default)]
pub(super) struct Decoder {
    call_ids: HashMap<usize, String>,
    finish_reason: Option<String>,
    usage: Usage,
}

impl Decode for Decoder {
    fn event(&mut self, _name: &str, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        self.chunk(data)
    }

    fn finish(&mut self) -> Result<ModelEvent, ProviderError> {
        self.finish_reason()
    }
}

impl Decoder {
    /// The events of the chunk `data`.
    fn chunk(&mut self, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|err| ProviderError::Protocol(format!("a chunk is not valid: {err}")))?;
        if let Some(error) = chunk.error {
            return Err(chunk_error(&error));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Usage {
                input_tokens: usage.prompt_tokens.unwrap_or_default(),
                output_tokens: usage.completion_tokens.unwrap_or_default(),
            };
        }
        let Some(choice) = chunk.choices.and_then(|choices| choices.into_iter().next()) else {
            return Ok(Vec::new());
        };
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason);
        }
        let mut events = Vec::new();
        if let Some(delta) = choice.delta {
            if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                events.push(ModelEvent::TextDelta(text));
            }
            for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                self.call(position, call, &mut events)?;
            }
        }
        Ok(events)
    }

    /// The closing event: the last finish reason seen, and the usage.
    fn finish_reason(&self) -> Result<ModelEvent, ProviderError> {
        let reason = match self.finish_reason.as_deref() {
            None => {
                return Err(ProviderError::Protocol(
                    "the stream ended without a finish reason".into(),
                ))
            }
            Some("stop") if !self.call_ids.is_empty() => FinishReason::ToolCalls,
            Some("stop") => FinishReason::Stop,
            Some("length") => FinishReason::Length,
            Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
            Some("content_filter") => FinishReason::ContentFilter,
            Some(_) => FinishReason::Other,
        };
        Ok(ModelEvent::Finish {
            reason,
            usage: self.usage,
        })
    }

    /// A piece of a tool call at `position` in its delta. A new id starts a
    /// call (its name must come with it); later pieces find their call by
    /// index, or by position when a server sends no index.
    fn call(
        &mut self,
        position: usize,
        call: CallDelta,
        events: &mut Vec<ModelEvent>,
    ) -> Result<(), ProviderError> {
        let index = call.index.unwrap_or(position);
        let (name, arguments) = call
            .function
            .map_or((None, None), |function| (function.name, function.arguments));
        let known = self.call_ids.get(&index);
        let id = match call.id.filter(|id| !id.is_empty()) {
            Some(id) if known == Some(&id) => id,
            Some(id) => {
                let name = name.filter(|name| !name.is_empty()).ok_or_else(|| {
                    ProviderError::Protocol(format!("tool call {id} began without a name"))
                })?;
                self.call_ids.insert(index, id.clone());
                events.push(ModelEvent::ToolCallStart {
                    id: id.clone(),
                    name,
                });
                id
            }
            None => known.cloned().ok_or_else(|| {
                ProviderError::Protocol(format!("tool call {index} continued before it began"))
            })?,
        };
        if let Some(delta) = arguments.filter(|arguments| !arguments.is_empty()) {
            events.push(ModelEvent::ToolCallDelta { id, delta });
        }
        Ok(())
    }
}

/// The error a server reported inside the stream: with its HTTP status when
/// it gives one as `code` or `status`.
fn chunk_error(error: &Value) -> ProviderError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map_or_else(|| error.to_string(), str::to_owned);
    let status = ["code", "status"]
        .iter()
        .find_map(|field| error.get(field)?.as_u64())
        .and_then(|status| u16::try_from(status).ok())
        .filter(|status| (400..600).contains(status));
    match status {
        Some(status) => ProviderError::Status { status, message },
        None => ProviderError::Protocol(format!("the provider reported an error: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&str]) -> Result<Vec<ModelEvent>, ProviderError> {
        let mut decoder = Decoder::default();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(decoder.chunk(chunk)?);
        }
        events.push(decoder.finish_reason()?);
        Ok(events)
    }

    fn finish(reason: FinishReason, input_tokens: u64, output_tokens: u64) -> ModelEvent {
        ModelEvent::Finish {
            reason,
            usage: Usage {
                input_tokens,
                output_tokens,
            },
        }
    }

    #[test]
    fn text_finish_reason_and_a_trailing_usage_chunk() {
        let events = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#,
        ])
        .unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::TextDelta("Hi".into()),
                finish(FinishReason::Length, 7, 2)
            ]
        );
    }

    #[test]
    fn a_whole_tool_call_in_one_delta_starts_then_continues() {
        let events = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"echo","arguments":"{\"q\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::ToolCallStart {
                    id: "c1".into(),
                    name: "echo".into()
                },
                ModelEvent::ToolCallDelta {
                    id: "c1".into(),
                    delta: "{\"q\":1}".into()
                },
                finish(FinishReason::ToolCalls, 0, 0),
            ]
        );
    }

    #[test]
    fn calls_without_an_index_are_told_apart_by_id() {
        let events = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"x","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"y","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ])
        .unwrap();
        let starts: Vec<_> = events
            .iter()
            .filter(|event| matches!(event, ModelEvent::ToolCallStart { .. }))
            .collect();
        assert_eq!(starts.len(), 2);
        assert_eq!(
            events[3],
            ModelEvent::ToolCallDelta {
                id: "b".into(),
                delta: "{}".into()
            }
        );
    }

    #[test]
    fn broken_streams_are_protocol_errors() {
        let cases: [&[&str]; 4] = [
            &["not json"],
            &[r#"{"choices":[{"delta":{"content":"cut off"}}]}"#],
            &[
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
            ],
            &[r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{}}]}}]}"#],
        ];
        for chunks in cases {
            let err = decode(chunks).unwrap_err();
            assert!(
                matches!(err, ProviderError::Protocol(_)),
                "{chunks:?}: {err}"
            );
        }
    }

    #[test]
    fn errors_in_the_stream_carry_their_message() {
        let err = decode(&[r#"{"error":{"code":502,"message":"upstream died"}}"#]).unwrap_err();
        assert!(
            matches!(&err, ProviderError::Status { status: 502, message } if message == "upstream died"),
            "{err}"
        );
        let err =
            decode(&[r#"{"error":{"message":"overloaded","type":"server_error","code":null}}"#])
                .unwrap_err();
        assert!(
            matches!(&err, ProviderError::Protocol(message) if message.ends_with("overloaded")),
            "{err}"
        );
    }
}
