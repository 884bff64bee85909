use serde_json::json;

use super::*;

fn message(raw: Value) -> Arc<UiMessage> {
    serde_json::from_value(raw).unwrap()
}

fn user(id: &str) -> Arc<UiMessage> {
    message(json!({"id": id, "role": "user", "parts": [{"type": "text", "text": id}]}))
}

fn calling(id: &str, call: &str) -> Arc<UiMessage> {
    message(json!({"id": id, "role": "assistant", "parts": [
        {"type": "tool-job", "toolCallId": call, "state": "output-available", "input": {}, "output": {"status": "pending"}},
    ]}))
}

#[test]
fn a_continuation_continues_the_message_that_made_its_calls() {
    let mut messages = vec![user("u1"), calling("a1", "c1")];
    let calls = HashSet::from(["c1"]);
    let continued = continued_message(&mut messages, &calls, "new".into());
    assert_eq!(continued.id, "a1");
    assert_eq!(messages.len(), 1);
}

#[test]
fn a_continuation_after_a_later_turn_answers_at_the_end() {
    let mut messages = vec![
        user("u1"),
        calling("a1", "c1"),
        user("u2"),
        calling("a2", "d1"),
    ];
    let calls = HashSet::from(["c1"]);
    let continued = continued_message(&mut messages, &calls, "new".into());
    assert_eq!(continued.id, "new");
    assert!(continued.parts.is_empty());
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["u1", "a1", "u2", "a2"]);
}

#[test]
fn a_continuation_after_an_unanswered_later_message_answers_at_the_end() {
    let mut messages = vec![user("u1"), calling("a1", "c1"), user("u2")];
    let calls = HashSet::from(["c1"]);
    let continued = continued_message(&mut messages, &calls, "new".into());
    assert_eq!(continued.id, "new");
    assert_eq!(messages.len(), 3);
}

#[test]
fn calls_no_stored_message_made_are_restored_into_the_last_assistant_message() {
    let mut messages = vec![user("u1"), calling("a1", "other")];
    let calls = HashSet::from(["c1"]);
    let continued = continued_message(&mut messages, &calls, "new".into());
    assert_eq!(continued.id, "a1");
}
