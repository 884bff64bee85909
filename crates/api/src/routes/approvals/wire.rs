//! Request and response bodies of the approval routes.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use toolserver_domain::AgentId;
use toolserver_store::approvals::ApprovalRecord;
use utoipa::ToSchema;

/// An approval as clients see it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// Its id (the `approvalId` of the turn's `tool-approval-request`).
    pub id: String,
    /// `pending`, `approved`, `denied` or `expired`.
    pub status: String,
    /// The agent whose turn asked.
    pub agent_id: String,
    /// The conversation.
    pub conversation_id: String,
    /// The assistant message holding the call.
    pub message_id: String,
    /// The call.
    pub tool_call_id: String,
    /// The tool's model-facing name.
    pub tool: String,
    /// The call's arguments.
    #[schema(value_type = Object)]
    pub input: Value,
    /// The end user the turn acts for, if any.
    pub user: Option<String>,
    /// End users who may decide; empty: anyone of the account.
    pub approvers: Vec<String>,
    /// Why a person decides (the policies that ask, or `needsApproval`).
    pub why: String,
    /// The reason given with the decision.
    pub reason: Option<String>,
    /// Who decided: `user:<sub>`, `account`, `link`, `chat` or `expiry`.
    pub decided_by: Option<String>,
    /// When the turn asked.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// When it lapses undecided (the call is then denied).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
    /// When it was decided.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub decided_at: Option<OffsetDateTime>,
    /// When the turn resumed with its decision.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub resumed_at: Option<OffsetDateTime>,
}

impl From<ApprovalRecord> for ApprovalView {
    fn from(record: ApprovalRecord) -> Self {
        Self {
            id: record.id,
            status: record.status,
            agent_id: AgentId::from_uuid(record.agent_id).to_string(),
            conversation_id: record.conversation_id,
            message_id: record.message_id,
            tool_call_id: record.tool_call_id,
            tool: record.tool,
            input: record.input,
            user: record.subject,
            approvers: record.approvers,
            why: record.why,
            reason: record.reason,
            decided_by: record.decided_by,
            created_at: record.created_at,
            expires_at: record.expires_at,
            decided_at: record.decided_at,
            resumed_at: record.resumed_at,
        }
    }
}

/// A page of approvals, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalPage {
    /// The approvals.
    pub approvals: Vec<ApprovalView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A decision on an approval.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionBody {
    /// Whether the call may run.
    pub approved: bool,
    /// Why; the model reads it with a denial.
    pub reason: Option<String>,
}

/// A decision taken.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionView {
    /// The approval as decided.
    pub approval: ApprovalView,
    /// The detached turn that carries the conversation on (poll it with
    /// `GET /async/{statusId}`, or follow the conversation's stream), when
    /// this decision was the last its assistant message waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_id: Option<String>,
}
