//! The Google Gemini streaming format:
//! `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, answered
//! with unnamed server-sent events, each a `GenerateContentResponse`.

use serde_json::{json, Value};

use super::frame::Frame;
use super::reply::Streamed;
use super::PROMPT_TOKENS;

/// The method the model path must name, after its last `:`.
pub(super) const STREAM_METHOD: &str = "streamGenerateContent";

/// The thought signature the first call of a reply carries (as Gemini's
/// thinking models sign the first call of a step), made from the scripted
/// call id so a test knows what must come back.
pub fn thought_signature(call_id: &str) -> String {
    format!("sig-{call_id}")
}

/// The step of a request: `model` contents after the user's last own turn
/// (a `user` content with text). Function responses come back as contents
/// holding only `functionResponse` parts, which are no turn of the user's.
pub(super) fn step(request: &Value) -> usize {
    let contents = request["contents"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let after_user = contents
        .iter()
        .rposition(is_user_turn)
        .map_or(0, |last| last + 1);
    contents[after_user..]
        .iter()
        .filter(|content| content["role"] == "model")
        .count()
}

fn is_user_turn(content: &Value) -> bool {
    content["role"] == "user"
        && content["parts"]
            .as_array()
            .is_some_and(|parts| parts.iter().any(|part| part.get("text").is_some()))
}

/// The `{"error": {code, message, status}}` body, its status named after
/// the HTTP `status`.
pub(super) fn error_body(status: u16, message: &str) -> Value {
    let name = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": message, "status": name}})
}

/// A chunk per word, then one with every function call (whole, as the API
/// sends them); the last chunk carries the finish reason, the usage and
/// the grounding sources, if any.
pub(super) fn frames(streamed: &Streamed, model: &str) -> Vec<Frame> {
    let mut chunks: Vec<Vec<Value>> = streamed
        .words()
        .map(|word| vec![json!({"text": word})])
        .collect();
    if !streamed.calls.is_empty() {
        chunks.push(
            streamed
                .calls
                .iter()
                .enumerate()
                .map(|(index, call)| {
                    let mut part =
                        json!({"functionCall": {"name": call.name, "args": call.arguments}});
                    if index == 0 {
                        part["thoughtSignature"] = json!(thought_signature(&call.id));
                    }
                    part
                })
                .collect(),
        );
    }
    if chunks.is_empty() {
        chunks.push(vec![json!({"text": ""})]);
    }
    let last = chunks.len() - 1;
    let mut responses: Vec<Value> = chunks
        .into_iter()
        .map(|parts| {
            json!({
                "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
                "modelVersion": model,
            })
        })
        .collect();
    let output_tokens = streamed.output_tokens();
    let end = &mut responses[last];
    end["candidates"][0]["finishReason"] = json!(finish_reason(streamed));
    if !streamed.sources.is_empty() {
        end["candidates"][0]["groundingMetadata"] = grounding(streamed);
    }
    end["usageMetadata"] = json!({
        "promptTokenCount": PROMPT_TOKENS,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": PROMPT_TOKENS + output_tokens,
    });
    responses.iter().map(Frame::data).collect()
}

/// `STOP`, or the reply's own reason upper-cased (`length` is `MAX_TOKENS`
/// here).
fn finish_reason(streamed: &Streamed) -> String {
    match streamed.finish_reason.as_deref() {
        Some("length") => "MAX_TOKENS".to_owned(),
        Some(reason) => reason.to_uppercase(),
        None => "STOP".to_owned(),
    }
}

/// The search that found the sources (the text's first word) and the pages.
fn grounding(streamed: &Streamed) -> Value {
    let query = streamed.text.split_whitespace().next().unwrap_or("query");
    let chunks: Vec<Value> = streamed
        .sources
        .iter()
        .map(|source| json!({"web": {"uri": source.url, "title": source.title}}))
        .collect();
    json!({"webSearchQueries": [query], "groundingChunks": chunks})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_responses_are_no_turn_of_the_users() {
        let call =
            json!({"role": "model", "parts": [{"functionCall": {"name": "echo", "args": {}}}]});
        let response = json!({"role": "user", "parts": [{"functionResponse": {"name": "echo", "response": {}}}]});
        let hi = json!({"role": "user", "parts": [{"text": "hi"}]});
        let request = |contents: Value| json!({"contents": contents});
        assert_eq!(step(&request(json!([hi]))), 0);
        assert_eq!(step(&request(json!([hi, call, response]))), 1);
        assert_eq!(
            step(&request(json!([hi, call, response, call, response]))),
            2
        );
        assert_eq!(step(&request(json!([hi, call, response, hi]))), 0);
    }
}
