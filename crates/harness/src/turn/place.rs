//! Where a call sits in its assistant message: its model pass (the steps
//! started up to it, from 1) and its place among that pass's tool calls
//! (from 0). Read from the message itself, so a call approved in a later
//! request, or a pass run again after a restart, is placed as it was.

use crate::ui::{UiMessage, UiPart};

/// The step and place of the call `tool_call_id` in `message`.
pub(super) fn call_place(message: &UiMessage, tool_call_id: &str) -> Option<(i32, i32)> {
    let (mut step, mut seq) = (0i32, 0i32);
    for part in &message.parts {
        match part {
            UiPart::StepStart => {
                step += 1;
                seq = 0;
            }
            UiPart::Tool(tool) if tool.tool_call_id == tool_call_id => return Some((step, seq)),
            UiPart::Tool(_) => seq += 1,
            UiPart::Text { .. } | UiPart::Other(_) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_call_is_placed_by_its_step_and_its_order_in_it() {
        let message: UiMessage =
            serde_json::from_value(json!({"id": "m", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-a", "toolCallId": "c1", "state": "input-available", "input": {}},
                {"type": "text", "text": "x"},
                {"type": "tool-b", "toolCallId": "c2", "state": "input-available", "input": {}},
                {"type": "step-start"},
                {"type": "tool-a", "toolCallId": "c3", "state": "input-available", "input": {}},
            ]}))
            .unwrap();
        assert_eq!(call_place(&message, "c1"), Some((1, 0)));
        assert_eq!(call_place(&message, "c2"), Some((1, 1)));
        assert_eq!(call_place(&message, "c3"), Some((2, 0)));
        assert_eq!(call_place(&message, "c4"), None);
    }
}
