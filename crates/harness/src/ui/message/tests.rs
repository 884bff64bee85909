use super::*;

#[test]
fn parts_round_trip_through_json() {
    let raw = json!({"id": "m1", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "text", "text": "hi", "state": "done"},
        {"type": "tool-echo", "toolCallId": "c1", "state": "output-available", "input": {"q": 1}, "output": {"ok": true}},
        {"type": "dynamic-tool", "toolName": "x", "toolCallId": "c2", "state": "approval-responded", "input": {}, "approval": {"id": "a", "approved": false, "reason": "no"}},
        {"type": "file", "mediaType": "image/png", "url": "data:,"},
    ]});
    let message: UiMessage = serde_json::from_value(raw.clone()).unwrap();
    assert!(
        matches!(&message.parts[3], UiPart::Tool(t) if t.dynamic && t.approval.as_ref().unwrap().approved == Some(false))
    );
    assert_eq!(serde_json::to_value(&message).unwrap(), raw);
}

#[test]
fn chunks_build_the_message_a_client_builds() {
    let mut message = UiMessage::assistant(String::new());
    for chunk in [
        UiChunk::Start {
            message_id: "m".into(),
        },
        UiChunk::StartStep,
        UiChunk::TextStart { id: "t".into() },
        UiChunk::TextDelta {
            id: "t".into(),
            delta: "Hel".into(),
        },
        UiChunk::TextDelta {
            id: "t".into(),
            delta: "lo".into(),
        },
        UiChunk::TextEnd { id: "t".into() },
        UiChunk::ToolInputStart {
            tool_call_id: "c".into(),
            tool_name: "echo".into(),
        },
        UiChunk::ToolInputAvailable {
            tool_call_id: "c".into(),
            tool_name: "echo".into(),
            input: json!({"q": 1}),
            provider_metadata: None,
        },
        UiChunk::ToolOutputAvailable {
            tool_call_id: "c".into(),
            output: json!(1),
            preliminary: Some(true),
        },
        UiChunk::ToolOutputAvailable {
            tool_call_id: "c".into(),
            output: json!(2),
            preliminary: None,
        },
        UiChunk::FinishStep,
    ] {
        message.apply(&chunk);
    }
    assert_eq!(message.id, "m");
    assert_eq!(message.text(), "Hello");
    let tool = message.tool_parts().next().unwrap();
    assert_eq!(
        (tool.state, tool.output.clone(), tool.preliminary),
        (ToolState::OutputAvailable, Some(json!(2)), false)
    );
}

fn part(state: ToolState, approved: Option<bool>) -> ToolPart {
    ToolPart {
        tool_name: "echo".into(),
        dynamic: false,
        tool_call_id: "c".into(),
        state,
        input: Some(json!({"q": 1})),
        output: Some(json!({"step": 1})),
        error_text: Some("boom".into()),
        approval: Some(Approval {
            id: "a".into(),
            approved,
            reason: None,
        }),
        preliminary: true,
        call_provider_metadata: None,
    }
}

fn keys(part: &ToolPart) -> Vec<String> {
    let value = serde_json::to_value(UiPart::Tool(Box::new(part.clone()))).unwrap();
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn each_state_is_written_with_only_the_fields_the_ai_sdk_allows_it() {
    let base = ["input", "state", "toolCallId", "type"];
    for (state, approved, extra) in [
        (ToolState::InputStreaming, None, vec![]),
        (ToolState::InputAvailable, None, vec![]),
        (ToolState::ApprovalRequested, None, vec!["approval"]),
        (ToolState::ApprovalResponded, Some(false), vec!["approval"]),
        (
            ToolState::OutputAvailable,
            None,
            vec!["output", "preliminary"],
        ),
        (
            ToolState::OutputAvailable,
            Some(true),
            vec!["approval", "output", "preliminary"],
        ),
        (ToolState::OutputError, None, vec!["errorText"]),
        (ToolState::OutputError, Some(false), vec!["errorText"]),
        (
            ToolState::OutputError,
            Some(true),
            vec!["approval", "errorText"],
        ),
        (ToolState::OutputDenied, Some(false), vec!["approval"]),
    ] {
        let mut expected: Vec<String> = base.iter().chain(&extra).map(|k| k.to_string()).collect();
        expected.sort();
        let mut part = part(state, approved);
        if approved.is_none() {
            part.approval = None;
        }
        if state == ToolState::ApprovalRequested {
            part.approval = Some(Approval {
                id: "a".into(),
                approved: None,
                reason: None,
            });
        }
        assert_eq!(keys(&part), expected, "{state:?} approved {approved:?}");
    }
}

#[test]
fn an_error_part_stored_with_output_is_read_and_written_without_it() {
    let stored = json!({"id": "m", "role": "assistant", "parts": [
        {"type": "tool-p", "toolCallId": "c", "state": "output-error", "input": {},
         "output": {"step": 2}, "preliminary": true, "errorText": "boom"},
    ]});
    let message: UiMessage = serde_json::from_value(stored.clone()).unwrap();
    let UiPart::Tool(tool) = &message.parts[0] else {
        panic!()
    };
    assert_eq!((&tool.output, tool.preliminary), (&None, false));
    let written = json!({"id": "m", "role": "assistant", "parts": [
        {"type": "tool-p", "toolCallId": "c", "state": "output-error", "input": {}, "errorText": "boom"},
    ]});
    assert_eq!(serde_json::to_value(&message).unwrap(), written);
    assert_eq!(UiMessage::rewrite_stored(stored), written);
    assert_eq!(
        UiMessage::rewrite_stored(json!("not a message")),
        json!("not a message")
    );
}

#[test]
fn a_call_failing_after_yielding_carries_its_last_output_in_the_error() {
    let mut message = UiMessage::assistant("m".into());
    for chunk in [
        UiChunk::ToolInputAvailable {
            tool_call_id: "c".into(),
            tool_name: "p".into(),
            input: json!({}),
            provider_metadata: None,
        },
        UiChunk::ToolOutputAvailable {
            tool_call_id: "c".into(),
            output: json!({"step": 2}),
            preliminary: Some(true),
        },
    ] {
        message.apply(&chunk);
    }
    let text = message.tool_part("c").unwrap().failure_text("boom");
    assert_eq!(text, "boom; its last output before that was {\"step\":2}");
    message.apply(&UiChunk::ToolOutputError {
        tool_call_id: "c".into(),
        error_text: text.clone(),
    });
    let tool = message.tool_part("c").unwrap();
    assert_eq!(
        (tool.state, &tool.output, &tool.error_text),
        (ToolState::OutputError, &None, &Some(text))
    );
    assert_eq!(
        tool.failure_text("again"),
        "again",
        "a failed call has no output left"
    );
}
