//! How one attempt of a turn's call starts: run by its tool, recorded in
//! the turn's ledger when the turn has one.

use serde_json::Value;

use crate::ledger::{CallPlace, TurnLedger};
use crate::tools::{RegisteredTool, ToolEvents};

/// The events of an attempt of `tool`'s call at `place`, recorded in the
/// turn's ledger if it has one.
pub(super) fn start_call(
    ledger: Option<&TurnLedger>,
    tool: &RegisteredTool,
    place: &CallPlace,
    input: Value,
) -> ToolEvents {
    let tool_call_id = place.tool_call_id.clone().unwrap_or_default();
    match ledger {
        Some(turn) => {
            let events = tool.call(tool_call_id, place.idempotency_key.clone(), input.clone());
            turn.ledger
                .recorded(&turn.scope, place, tool, &input, events)
        }
        None => tool.call(tool_call_id, place.idempotency_key.clone(), input),
    }
}
