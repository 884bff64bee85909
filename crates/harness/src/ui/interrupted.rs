//! A turn whose server process died mid-stream, stored as far as it was
//! streamed. The AI SDK has no interrupted state, so the message says so in
//! ways `safeValidateUIMessages` accepts (ai 6 and 7):
//! - its `metadata` object carries `"interrupted": true` (merged into any
//!   metadata it had);
//! - a text part cut off keeps `state: "streaming"`;
//! - a tool call that had not settled becomes `output-error` with an
//!   `errorText` saying the turn was interrupted (its output, if it had
//!   yielded any, is not kept: an error part has none);
//! - a call waiting for a person (`approval-requested`) stays as it was, to
//!   be answered by the next request.

use serde_json::{json, Map, Value};

use super::{ToolState, UiChunk, UiMessage, UiPart};

/// The metadata key marking an interrupted message.
pub const INTERRUPTED_KEY: &str = "interrupted";

/// What an unsettled call of an interrupted turn tells the model and the page.
const INTERRUPTED_CALL: &str =
    "the turn was interrupted before this call finished: the server running it stopped";

/// `stored` (a conversation's messages) with the turn whose recorded chunks
/// are `chunks` applied as the AI SDK client applies them, and marked
/// interrupted; `None` when there is nothing to store (the turn recorded no
/// content, or the stored messages do not parse).
pub fn with_interrupted_turn(stored: Vec<Value>, chunks: &[String]) -> Option<Vec<Value>> {
    let parsed: Vec<UiChunk> = chunks
        .iter()
        .filter_map(|text| serde_json::from_str(text).ok())
        .collect();
    let message_id = parsed.iter().find_map(|chunk| match chunk {
        UiChunk::Start { message_id } => Some(message_id.clone()),
        _ => None,
    })?;
    let mut messages: Vec<UiMessage> = serde_json::from_value(Value::Array(stored)).ok()?;
    let mut message = match messages.last() {
        Some(last) if last.role == "assistant" && last.id == message_id => messages.pop()?,
        _ => UiMessage::assistant(message_id),
    };
    let before = message.clone();
    for chunk in &parsed {
        message.apply(chunk);
    }
    if message.parts == before.parts {
        return None;
    }
    mark_interrupted(&mut message);
    messages.push(message);
    serde_json::to_value(messages)
        .ok()
        .and_then(|value| match value {
            Value::Array(items) => Some(items),
            _ => None,
        })
}

/// Settles what the turn left open and marks the message interrupted.
fn mark_interrupted(message: &mut UiMessage) {
    for part in &mut message.parts {
        let UiPart::Tool(tool) = part else { continue };
        if tool.is_settled() || tool.state == ToolState::ApprovalRequested {
            continue;
        }
        tool.state = ToolState::OutputError;
        tool.output = None;
        tool.preliminary = false;
        tool.error_text = Some(INTERRUPTED_CALL.to_owned());
        if tool.input.is_none() {
            tool.input = Some(json!({}));
        }
    }
    let mut metadata = match message.metadata.take() {
        Some(Value::Object(map)) => map,
        Some(other) => Map::from_iter([("client".to_owned(), other)]),
        None => Map::new(),
    };
    metadata.insert(INTERRUPTED_KEY.to_owned(), Value::Bool(true));
    message.metadata = Some(Value::Object(metadata));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(chunks: &[Value]) -> Vec<String> {
        chunks.iter().map(Value::to_string).collect()
    }

    #[test]
    fn a_cut_off_turn_is_stored_as_far_as_it_streamed() {
        let stored =
            vec![json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})];
        let chunks = texts(&[
            json!({"type": "start", "messageId": "m1"}),
            json!({"type": "start-step"}),
            json!({"type": "text-start", "id": "t"}),
            json!({"type": "text-delta", "id": "t", "delta": "Hel"}),
            json!({"type": "tool-input-start", "toolCallId": "c1", "toolName": "echo"}),
            json!({"type": "tool-input-available", "toolCallId": "c1", "toolName": "echo", "input": {"q": 1}}),
            json!({"type": "tool-output-available", "toolCallId": "c1", "output": 1, "preliminary": true}),
            json!({"type": "error", "errorText": "the server running this turn stopped"}),
            json!({"type": "finish", "finishReason": "error"}),
        ]);
        let messages = with_interrupted_turn(stored, &chunks).unwrap();
        assert_eq!(messages.len(), 2);
        let message = &messages[1];
        assert_eq!(message["id"], "m1");
        assert_eq!(message["metadata"], json!({"interrupted": true}));
        assert_eq!(
            message["parts"][1],
            json!({"type": "text", "text": "Hel", "state": "streaming"})
        );
        let call = &message["parts"][2];
        assert_eq!(call["state"], "output-error");
        assert_eq!(call["errorText"], INTERRUPTED_CALL);
        assert!(call.get("output").is_none());
    }

    #[test]
    fn a_continued_message_takes_the_chunks_of_its_continuation() {
        let stored = vec![
            json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}),
            json!({"id": "m1", "role": "assistant", "parts": [{"type": "text", "text": "A", "state": "done"}]}),
        ];
        let chunks = texts(&[
            json!({"type": "start", "messageId": "m1"}),
            json!({"type": "text-start", "id": "t"}),
            json!({"type": "text-delta", "id": "t", "delta": "B"}),
        ]);
        let messages = with_interrupted_turn(stored, &chunks).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1]["parts"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_turn_that_streamed_no_content_stores_nothing() {
        let stored =
            vec![json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})];
        assert!(with_interrupted_turn(stored.clone(), &[]).is_none());
        let start = texts(&[json!({"type": "start", "messageId": "m1"})]);
        assert!(with_interrupted_turn(stored, &start).is_none());
    }
}
