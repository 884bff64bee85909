//! How the ledger's attempts are shown.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use toolserver_domain::{AgentId, ToolCallId, ToolId};
use toolserver_store::tool_calls::AttemptRecord;
use utoipa::ToSchema;

/// A page of attempts, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallPage {
    /// The attempts.
    pub tool_calls: Vec<ToolCallView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A payload as the ledger keeps it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayloadView {
    /// The JSON text, or its head when `truncated`; absent once the
    /// payload retention dropped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether `text` is only the head of the payload.
    pub truncated: bool,
    /// Length of the whole JSON text in bytes.
    pub bytes: i64,
    /// SHA-256 of the whole JSON text (hex).
    pub sha256: String,
}

/// One attempt of a tool call.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    /// The attempt's id.
    pub id: String,
    /// What made the call: `turn`, `detached`, `invoke` or `mcp`.
    pub path: String,
    /// `running`, or how the attempt ended.
    pub status: String,
    /// The attempt's number, from 1.
    pub attempt: i32,
    /// The tool's name.
    pub tool_name: String,
    /// The uploaded tool, if it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The uploaded tool's version the attempt ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<i32>,
    /// SHA-256 of the bundle the attempt ran (hex).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_sha256: Option<String>,
    /// The end user (the subject of the token that made the call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The agent whose turn made the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The conversation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// The turn: its assistant message id, or a detached turn's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The model pass of the turn that made the call, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<i32>,
    /// The call's place among its pass's calls, from 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<i32>,
    /// The model's call id (or the direct call's id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The key the tool got as `ctx.idempotencyKey`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The trace the attempt ran in, when traces are exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// A detached call's status id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_id: Option<String>,
    /// The input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<PayloadView>,
    /// The output, when the attempt returned one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PayloadView>,
    /// Why the attempt failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the call was made (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub queued_at: OffsetDateTime,
    /// When the attempt started.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: OffsetDateTime,
    /// When it ended; absent while it runs.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ended_at: Option<OffsetDateTime>,
    /// Milliseconds from start to end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
    /// When the payload retention dropped its payloads' text.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub payloads_pruned_at: Option<OffsetDateTime>,
}

fn payload(
    text: Option<String>,
    sha256: Option<Vec<u8>>,
    bytes: Option<i64>,
) -> Option<PayloadView> {
    let (sha256, bytes) = (sha256?, bytes?);
    let truncated = text
        .as_ref()
        .is_some_and(|text| (text.len() as i64) < bytes);
    Some(PayloadView {
        text,
        truncated,
        bytes,
        sha256: hex::encode(sha256),
    })
}

impl From<AttemptRecord> for ToolCallView {
    fn from(row: AttemptRecord) -> Self {
        let duration_ms = row
            .ended_at
            .map(|ended| (ended - row.started_at).whole_milliseconds() as i64);
        Self {
            id: ToolCallId::from_uuid(row.id).to_string(),
            path: row.path,
            status: row.status,
            attempt: row.attempt,
            tool_name: row.tool_name,
            tool_id: row.tool_id.map(|id| ToolId::from_uuid(id).to_string()),
            tool_version: row.tool_version,
            bundle_sha256: row.bundle_sha256,
            user: row.subject,
            agent_id: row.agent_id.map(|id| AgentId::from_uuid(id).to_string()),
            conversation_id: row.conversation_id,
            turn_id: row.turn_id,
            step: row.step,
            seq: row.seq,
            tool_call_id: row.tool_call_id,
            idempotency_key: row.idempotency_key,
            trace_id: row.trace_id,
            result_id: row.result_id.map(|id| id.to_string()),
            input: payload(row.input, row.input_sha256, row.input_bytes),
            output: payload(row.output, row.output_sha256, row.output_bytes),
            error: row.error,
            queued_at: row.queued_at,
            started_at: row.started_at,
            ended_at: row.ended_at,
            duration_ms,
            payloads_pruned_at: row.payloads_pruned_at,
        }
    }
}
