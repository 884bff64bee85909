//! Model providers behind one trait: a request of chat messages and tool
//! specifications in, a stream of text deltas, tool calls, usage and a finish
//! reason out.

pub mod anthropic;
pub mod google;
pub mod openai;
mod send;
mod sse;
mod transport;
mod turns;

pub use transport::ProviderHttp;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::{Map, Value};

/// One message of the model-facing history.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    /// What the user said.
    User {
        /// The text.
        content: String,
    },
    /// One model pass: its text and the tool calls it made.
    Assistant {
        /// Text the model produced (may be empty).
        content: String,
        /// Tool calls the model made, in order.
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering an earlier assistant tool call.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The result, as JSON text.
        content: String,
    },
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Provider-assigned call id.
    pub id: String,
    /// Model-facing tool name.
    pub name: String,
    /// The arguments as the model wrote them (JSON text, possibly invalid).
    pub arguments: String,
    /// What the provider attached to the call and wants back with it in
    /// later passes, keyed by provider (Gemini's thought signature:
    /// `{"google": {"thoughtSignature": …}}`).
    pub provider_metadata: Option<Value>,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Model-facing name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// JSON Schema (an object schema) of the arguments.
    pub parameters: Value,
}

/// One model pass to run.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The provider's model id.
    pub model_id: String,
    /// System prompt, if any.
    pub system: Option<String>,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Functions offered to the model.
    pub tools: Vec<ToolSpec>,
    /// Provider-defined tools offered to the model (e.g. `googleSearch`).
    pub provider_tools: Vec<String>,
    /// Generation options from the agent config (`temperature`, `topP`,
    /// `maxOutputTokens`, `seed`), already validated.
    pub options: Map<String, Value>,
    /// Sent as `Idempotency-Key`: stable across retries of the same pass
    /// (a detached turn's job retried after a crash repeats it).
    pub idempotency_key: Option<String>,
}

/// Why a model pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The output token limit was reached.
    Length,
    /// The model stopped to call tools.
    ToolCalls,
    /// The provider filtered the content.
    ContentFilter,
    /// Anything else the provider reported.
    Other,
}

impl FinishReason {
    /// The name the UI message stream uses.
    pub fn as_ui(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool-calls",
            Self::ContentFilter => "content-filter",
            Self::Other => "other",
        }
    }
}

/// Token counts of one pass, when the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// One event of a streaming model pass.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// A piece of answer text.
    TextDelta(String),
    /// The model began a tool call.
    ToolCallStart {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument text of a started call.
    ToolCallDelta {
        /// Call id.
        id: String,
        /// The next piece of JSON argument text.
        delta: String,
    },
    /// A web page the provider's own search grounded the answer on.
    Source {
        /// Id of the source within the turn.
        id: String,
        /// The page's address.
        url: String,
        /// The page's title, when the provider gives one.
        title: Option<String>,
    },
    /// What the provider attached to a started call, to be sent back with
    /// it (see [`ToolCall::provider_metadata`]).
    ToolCallMetadata {
        /// Call id.
        id: String,
        /// The metadata, keyed by provider.
        metadata: Value,
    },
    /// The pass ended. Always the last event of a successful stream.
    Finish {
        /// Why it ended.
        reason: FinishReason,
        /// Token usage, zero when not reported.
        usage: Usage,
    },
}

/// A failed model call.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with an error status.
    #[error("model provider answered {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider could not be reached, or the stream broke.
    #[error("model provider unreachable: {0}")]
    Transport(String),
    /// The provider sent something that is not the protocol.
    #[error("model provider sent an invalid stream: {0}")]
    Protocol(String),
    /// The outbound address is not allowed.
    #[error("{0}")]
    Forbidden(String),
}

/// A stream of events of one pass.
pub type ModelStream = BoxStream<'static, Result<ModelEvent, ProviderError>>;

/// A model provider.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// Starts one streaming pass.
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError>;
}
