//! The frames of the AI SDK's `WebSocketChatTransport` protocol: requests
//! from the client (`send`, `resume`, `abort`, each with a `requestId`), and
//! the answers to them (`start`, `chunk` with a sequence from 0, `end`,
//! `error`, `no-active`).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::routes::agents::chat_request::{ChatRequest, Trigger};

/// A request from the client. Fields the transport sends that the server
/// does not use (`headers`, `body`, `metadata`) are ignored.
#[derive(Debug, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum ClientFrame {
    /// Run a turn, as `POST /agents/{agentId}/chat` does.
    Send {
        /// Names this request's answers.
        request_id: String,
        /// The conversation id.
        id: String,
        /// `submit-message` or `regenerate-message`.
        trigger: Trigger,
        /// With `regenerate-message`: the assistant message to replace.
        message_id: Option<String>,
        /// The conversation's UI messages.
        messages: Vec<Value>,
    },
    /// Replay the conversation's running turn and follow it.
    Resume {
        /// Names this request's answers.
        request_id: String,
        /// The conversation id.
        id: String,
        /// The last chunk the client has; replay starts after it.
        last_sequence: Option<u32>,
    },
    /// Stop answering a request (the turn itself follows the agent's
    /// `onDisconnect`; `POST .../stop` ends it).
    Abort {
        /// The request to stop answering.
        request_id: String,
    },
}

impl ClientFrame {
    /// The request this frame is about.
    pub fn request_id(&self) -> &str {
        match self {
            Self::Send { request_id, .. }
            | Self::Resume { request_id, .. }
            | Self::Abort { request_id } => request_id,
        }
    }
}

/// A `send` frame as the turn request it is.
pub fn chat_request(
    id: String,
    trigger: Trigger,
    message_id: Option<String>,
    messages: Vec<Value>,
) -> ChatRequest {
    ChatRequest {
        id,
        messages,
        trigger,
        message_id,
    }
}

/// An answer to a request.
#[derive(Debug, Clone, Copy)]
pub enum ServerFrame<'a> {
    /// The request is answered with a stream; chunks follow.
    Start,
    /// One UI message chunk (a JSON text) and its index in the turn's
    /// stream (0: its `start`).
    Chunk(i64, &'a str),
    /// The stream ended.
    End,
    /// The request was refused or failed, and why.
    Error(&'a str),
    /// A resume found no running turn.
    NoActive,
}

impl ServerFrame<'_> {
    /// The frame answering `request_id`, as the JSON text sent.
    pub fn to_text(self, request_id: &str) -> String {
        let request_id = Value::from(request_id);
        match self {
            Self::Start => json!({"type": "start", "requestId": request_id}).to_string(),
            Self::Chunk(sequence, chunk) => format!(
                r#"{{"type":"chunk","requestId":{request_id},"sequence":{sequence},"chunk":{chunk}}}"#
            ),
            Self::End => json!({"type": "end", "requestId": request_id}).to_string(),
            Self::Error(text) => {
                json!({"type": "error", "requestId": request_id, "errorText": text}).to_string()
            }
            Self::NoActive => json!({"type": "no-active", "requestId": request_id}).to_string(),
        }
    }
}
