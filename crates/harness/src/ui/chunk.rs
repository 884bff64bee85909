//! Chunks of the UI message stream, with exactly the fields the protocol
//! defines (strict clients reject unknown ones).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One `data:` frame of the UI message stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum UiChunk {
    /// The assistant message begins (or continues, after an approval).
    #[serde(rename_all = "camelCase")]
    Start {
        /// Id of the assistant message.
        message_id: String,
    },
    /// A model pass begins.
    StartStep,
    /// A text part begins.
    TextStart {
        /// Part id.
        id: String,
    },
    /// More text of an open text part.
    TextDelta {
        /// Part id.
        id: String,
        /// The text.
        delta: String,
    },
    /// A text part ends.
    TextEnd {
        /// Part id.
        id: String,
    },
    /// The model began a tool call.
    #[serde(rename_all = "camelCase")]
    ToolInputStart {
        /// Call id.
        tool_call_id: String,
        /// Model-facing tool name.
        tool_name: String,
    },
    /// More of a tool call's argument text.
    #[serde(rename_all = "camelCase")]
    ToolInputDelta {
        /// Call id.
        tool_call_id: String,
        /// JSON text.
        input_text_delta: String,
    },
    /// A tool call's input is complete.
    #[serde(rename_all = "camelCase")]
    ToolInputAvailable {
        /// Call id.
        tool_call_id: String,
        /// Model-facing tool name.
        tool_name: String,
        /// The parsed input.
        input: Value,
        /// What the provider attached to the call, by provider.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
    /// A tool call's input could not be used (unparseable, or no such tool).
    #[serde(rename_all = "camelCase")]
    ToolInputError {
        /// Call id.
        tool_call_id: String,
        /// Model-facing tool name.
        tool_name: String,
        /// The raw input.
        input: Value,
        /// What was wrong.
        error_text: String,
    },
    /// A call waits for a person's decision.
    #[serde(rename_all = "camelCase")]
    ToolApprovalRequest {
        /// Id the decision must quote.
        approval_id: String,
        /// Call id.
        tool_call_id: String,
    },
    /// A tool's output: a preliminary snapshot, or the final value.
    #[serde(rename_all = "camelCase")]
    ToolOutputAvailable {
        /// Call id.
        tool_call_id: String,
        /// The output.
        output: Value,
        /// Set on each snapshot of a streaming tool before its final output.
        #[serde(skip_serializing_if = "Option::is_none")]
        preliminary: Option<bool>,
    },
    /// A tool failed.
    #[serde(rename_all = "camelCase")]
    ToolOutputError {
        /// Call id.
        tool_call_id: String,
        /// What happened.
        error_text: String,
    },
    /// A person denied the call.
    #[serde(rename_all = "camelCase")]
    ToolOutputDenied {
        /// Call id.
        tool_call_id: String,
    },
    /// A web page the answer is grounded on (the provider's own search).
    #[serde(rename_all = "camelCase")]
    SourceUrl {
        /// Source id.
        source_id: String,
        /// The page's address.
        url: String,
        /// The page's title.
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// A call waits for its end user to authorize a connection: where to
    /// go (a `data-authorization` part of the message).
    #[serde(rename = "data-authorization")]
    DataAuthorization {
        /// The part's id (the authorization's), so a later chunk can
        /// replace it.
        id: String,
        /// `authorizationId`, `toolCallId`, `provider`, `url`, `expiresAt`.
        data: Value,
    },
    /// A model pass ended.
    FinishStep,
    /// The turn ended.
    #[serde(rename_all = "camelCase")]
    Finish {
        /// Why: `stop`, `length`, `content-filter`, `tool-calls`, `error`, `other`.
        finish_reason: String,
        /// Merged into the message's `metadata` (the turn's cost).
        #[serde(skip_serializing_if = "Option::is_none")]
        message_metadata: Option<Value>,
    },
    /// The turn failed or hit a limit.
    #[serde(rename_all = "camelCase")]
    Error {
        /// What happened.
        error_text: String,
    },
    /// The turn was stopped before it finished.
    Abort,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn chunks_serialize_with_protocol_field_names_only() {
        let cases = [
            (
                UiChunk::Start {
                    message_id: "m".into(),
                },
                json!({"type": "start", "messageId": "m"}),
            ),
            (UiChunk::StartStep, json!({"type": "start-step"})),
            (UiChunk::Abort, json!({"type": "abort"})),
            (
                UiChunk::SourceUrl {
                    source_id: "s".into(),
                    url: "https://a.example/".into(),
                    title: None,
                },
                json!({"type": "source-url", "sourceId": "s", "url": "https://a.example/"}),
            ),
            (
                UiChunk::ToolInputDelta {
                    tool_call_id: "c".into(),
                    input_text_delta: "{".into(),
                },
                json!({"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "{"}),
            ),
            (
                UiChunk::ToolOutputAvailable {
                    tool_call_id: "c".into(),
                    output: json!(1),
                    preliminary: None,
                },
                json!({"type": "tool-output-available", "toolCallId": "c", "output": 1}),
            ),
            (
                UiChunk::ToolApprovalRequest {
                    approval_id: "a".into(),
                    tool_call_id: "c".into(),
                },
                json!({"type": "tool-approval-request", "approvalId": "a", "toolCallId": "c"}),
            ),
            (
                UiChunk::Finish {
                    finish_reason: "tool-calls".into(),
                    message_metadata: None,
                },
                json!({"type": "finish", "finishReason": "tool-calls"}),
            ),
        ];
        for (chunk, expected) in cases {
            assert_eq!(serde_json::to_value(&chunk).unwrap(), expected);
        }
    }
}
