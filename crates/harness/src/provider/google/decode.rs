//! Turning `GenerateContentResponse` chunks into model events: text parts,
//! whole function calls (given an id when the API sends none, and carrying
//! their thought signature, which later passes must send back), the grounding
//! sources of the provider's search, and the finish reason and usage that
//! close the pass.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use crate::provider::sse::Decode;
use crate::provider::{FinishReason, ModelEvent, ProviderError, Usage};

/// One `data:` chunk.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    grounding_metadata: Option<GroundingMetadata>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    function_call: Option<FunctionCall>,
    #[serde(default)]
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroundingMetadata {
    #[serde(default)]
    grounding_chunks: Vec<GroundingChunk>,
}

#[derive(Deserialize)]
struct GroundingChunk {
    #[serde(default)]
    web: Option<WebSource>,
}

#[derive(Deserialize)]
struct WebSource {
    uri: String,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    message: String,
}

/// The state of one pass: whether it made calls, the sources already sent,
/// the finish reason and the usage so far.
#[derive(Default)]
pub(super) struct Decoder {
    called: bool,
    sources: HashSet<String>,
    finish_reason: Option<String>,
    usage: Usage,
}

impl Decode for Decoder {
    fn event(&mut self, _name: &str, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|err| ProviderError::Protocol(format!("a chunk is not valid: {err}")))?;
        if let Some(error) = chunk.error {
            return Err(match error.code.filter(|code| (400..600).contains(code)) {
                Some(status) => ProviderError::Status {
                    status,
                    message: error.message,
                },
                None => ProviderError::Protocol(format!(
                    "the provider reported an error: {}",
                    error.message
                )),
            });
        }
        if let Some(usage) = chunk.usage_metadata {
            self.usage = Usage {
                input_tokens: usage.prompt_token_count.unwrap_or_default(),
                output_tokens: usage.candidates_token_count.unwrap_or_default()
                    + usage.thoughts_token_count.unwrap_or_default(),
            };
        }
        if let Some(reason) = chunk
            .prompt_feedback
            .and_then(|feedback| feedback.block_reason)
        {
            self.finish_reason = Some(format!("PROMPT_{reason}"));
        }
        let mut events = Vec::new();
        let Some(candidate) = chunk.candidates.into_iter().next() else {
            return Ok(events);
        };
        for part in candidate
            .content
            .into_iter()
            .flat_map(|content| content.parts)
        {
            self.part(part, &mut events);
        }
        let chunks = candidate
            .grounding_metadata
            .into_iter()
            .flat_map(|metadata| metadata.grounding_chunks);
        for web in chunks.filter_map(|chunk| chunk.web) {
            if self.sources.insert(web.uri.clone()) {
                events.push(ModelEvent::Source {
                    id: format!("src_{}", uuid::Uuid::new_v4().simple()),
                    url: web.uri,
                    title: web.title.filter(|title| !title.is_empty()),
                });
            }
        }
        if candidate.finish_reason.is_some() {
            self.finish_reason = candidate.finish_reason;
        }
        Ok(events)
    }

    fn finish(&mut self) -> Result<ModelEvent, ProviderError> {
        let reason = match self.finish_reason.as_deref() {
            None => {
                return Err(ProviderError::Protocol(
                    "the stream ended without a finish reason".into(),
                ))
            }
            Some(_) if self.called => FinishReason::ToolCalls,
            Some("STOP") => FinishReason::Stop,
            Some("MAX_TOKENS") => FinishReason::Length,
            Some(
                "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
                | "IMAGE_SAFETY",
            ) => FinishReason::ContentFilter,
            Some(reason) if reason.starts_with("PROMPT_") => FinishReason::ContentFilter,
            Some(_) => FinishReason::Other,
        };
        Ok(ModelEvent::Finish {
            reason,
            usage: self.usage,
        })
    }
}

impl Decoder {
    /// The events of one part: its text (thoughts are not the answer), or
    /// a whole function call as a start and one delta of its arguments.
    fn part(&mut self, part: Part, events: &mut Vec<ModelEvent>) {
        if let Some(call) = part.function_call {
            self.called = true;
            let id = call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple()));
            let arguments = call
                .args
                .unwrap_or_else(|| Value::Object(Default::default()));
            events.push(ModelEvent::ToolCallStart {
                id: id.clone(),
                name: call.name,
            });
            events.push(ModelEvent::ToolCallDelta {
                id: id.clone(),
                delta: arguments.to_string(),
            });
            if let Some(signature) = part.thought_signature.filter(|s| !s.is_empty()) {
                events.push(ModelEvent::ToolCallMetadata {
                    id,
                    metadata: serde_json::json!({"google": {"thoughtSignature": signature}}),
                });
            }
        } else if let Some(text) = part.text.filter(|text| !text.is_empty() && !part.thought) {
            events.push(ModelEvent::TextDelta(text));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decode(chunks: &[Value]) -> Result<Vec<ModelEvent>, ProviderError> {
        let mut decoder = Decoder::default();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(decoder.event("message", &chunk.to_string())?);
        }
        events.push(decoder.finish()?);
        Ok(events)
    }

    fn parts(parts: Value) -> Value {
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}]})
    }

    #[test]
    fn text_thoughts_and_sources() {
        let mut last = parts(json!([{"text": "there."}]));
        last["candidates"][0]["finishReason"] = json!("STOP");
        last["candidates"][0]["groundingMetadata"] = json!({
            "webSearchQueries": ["hello"],
            "groundingChunks": [
                {"web": {"uri": "https://a.example/", "title": "a.example"}},
                {"web": {"uri": "https://b.example/", "title": ""}},
                {"web": {"uri": "https://a.example/", "title": "again"}},
            ],
        });
        last["usageMetadata"] =
            json!({"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 2});
        let mut events = decode(&[
            parts(json!([{"text": "pondering", "thought": true}])),
            parts(json!([{"text": "Hello "}])),
            last,
        ])
        .unwrap();
        let mut ids = std::collections::HashSet::new();
        for event in &mut events {
            if let ModelEvent::Source { id, .. } = event {
                assert!(id.starts_with("src_") && ids.insert(id.clone()), "{id}");
                *id = format!("src_{}", ids.len());
            }
        }
        assert_eq!(
            events,
            [
                ModelEvent::TextDelta("Hello ".into()),
                ModelEvent::TextDelta("there.".into()),
                ModelEvent::Source {
                    id: "src_1".into(),
                    url: "https://a.example/".into(),
                    title: Some("a.example".into())
                },
                ModelEvent::Source {
                    id: "src_2".into(),
                    url: "https://b.example/".into(),
                    title: None
                },
                ModelEvent::Finish {
                    reason: FinishReason::Stop,
                    usage: Usage {
                        input_tokens: 10,
                        output_tokens: 6
                    }
                },
            ]
        );
    }

    #[test]
    fn parallel_calls_arrive_whole_and_get_ids() {
        let mut chunk = parts(json!([
            {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}, "thoughtSignature": "c2ln"},
            {"functionCall": {"id": "given", "name": "time"}},
        ]));
        chunk["candidates"][0]["finishReason"] = json!("STOP");
        let events = decode(&[chunk]).unwrap();
        let [ModelEvent::ToolCallStart { id, name }, ModelEvent::ToolCallDelta { id: same, delta }, ModelEvent::ToolCallMetadata {
            id: signed,
            metadata,
        }, ModelEvent::ToolCallStart { id: given, .. }, ModelEvent::ToolCallDelta { delta: empty, .. }, ModelEvent::Finish { reason, .. }] =
            events.as_slice()
        else {
            panic!("{events:?}");
        };
        assert_eq!(signed, id);
        assert_eq!(metadata, &json!({"google": {"thoughtSignature": "c2ln"}}));
        assert!(id.starts_with("call_") && id == same, "{id} {same}");
        assert_eq!(name, "weather");
        assert_eq!(delta, r#"{"city":"Oslo"}"#);
        assert_eq!(given, "given");
        assert_eq!(empty, "{}");
        assert_eq!(*reason, FinishReason::ToolCalls);
    }

    #[test]
    fn blocks_errors_and_broken_streams() {
        let events =
            decode(&[json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}})])
                .unwrap();
        assert!(matches!(
            events.as_slice(),
            [ModelEvent::Finish {
                reason: FinishReason::ContentFilter,
                ..
            }]
        ));
        let mut limited = parts(json!([{"text": "cut"}]));
        limited["candidates"][0]["finishReason"] = json!("MAX_TOKENS");
        assert!(matches!(
            decode(&[limited]).unwrap().last(),
            Some(ModelEvent::Finish {
                reason: FinishReason::Length,
                ..
            })
        ));
        let err = decode(&[
            json!({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}),
        ])
        .unwrap_err();
        assert!(
            matches!(&err, ProviderError::Status { status: 503, message } if message == "overloaded"),
            "{err}"
        );
        let err = decode(&[parts(json!([{"text": "cut off"}]))]).unwrap_err();
        assert!(matches!(err, ProviderError::Protocol(_)), "{err}");
    }
}
