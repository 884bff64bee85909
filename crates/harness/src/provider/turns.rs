//! What the Messages and Gemini bodies share: a conversation written as
//! alternating turns of pieces (content blocks, parts), and a call's
//! arguments as the JSON object those APIs want.

use serde_json::{json, Value};

/// `pieces` as turns of `(role, pieces)`: empty ones left out, consecutive
/// ones of one role merged (these APIs want the roles to alternate).
pub(super) fn merged_by_role(
    pieces: impl IntoIterator<Item = (&'static str, Vec<Value>)>,
) -> Vec<(&'static str, Vec<Value>)> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for (role, piece) in pieces {
        if piece.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, merged)) if *last == role => merged.extend(piece),
            _ => turns.push((role, piece)),
        }
    }
    turns
}

/// A call's arguments as a JSON object; arguments that were not one (the
/// call failed on them) go back empty.
pub(super) fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => json!({}),
    }
}
