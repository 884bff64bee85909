//! The approvals a turn's assistant message waits on, with why a person
//! decides and who may.

use serde_json::Value;

use crate::policy::Decision;
use crate::tools::ToolRegistry;
use crate::ui::{ToolState, UiMessage};

/// One call the turn stopped on.
#[derive(Debug, Clone, PartialEq)]
pub struct AskedApproval {
    /// The `approvalId` the client saw.
    pub approval_id: String,
    /// The call.
    pub tool_call_id: String,
    /// The tool's model-facing name.
    pub tool: String,
    /// The call's arguments.
    pub input: Value,
    /// End users who may decide (empty: anyone of the account), from the
    /// asking policies' `@approvers`.
    pub approvers: Vec<String>,
    /// Why a person decides.
    pub why: String,
}

/// The calls of `assistant` waiting for a decision, judged again by
/// `registry`'s policies for why and by whom.
pub fn asked_in(registry: &ToolRegistry, assistant: &UiMessage) -> Vec<AskedApproval> {
    assistant
        .tool_parts()
        .filter(|part| part.state == ToolState::ApprovalRequested)
        .filter_map(|part| {
            let approval_id = part.approval.as_ref()?.id.clone();
            let input = part.input.clone().unwrap_or(Value::Null);
            let verdict = registry
                .get(&part.tool_name)
                .and_then(|tool| registry.verdict(tool, &input))
                .filter(|verdict| verdict.decision == Decision::Ask);
            let (approvers, why) = match verdict {
                Some(verdict) => (verdict.approvers, verdict.reasons.join("; ")),
                None => (
                    Vec::new(),
                    format!("the agent's config marks {} needsApproval", part.tool_name),
                ),
            };
            Some(AskedApproval {
                approval_id,
                tool_call_id: part.tool_call_id.clone(),
                tool: part.tool_name.clone(),
                input,
                approvers,
                why,
            })
        })
        .collect()
}
