//! Pure domain types for toolserver: identifiers, tool manifests and their
//! validation rules. Nothing here performs I/O; values that exist are valid.

pub mod account;
pub mod agent;
pub mod conversation;
pub mod digest;
pub mod effects;
pub mod egress;
pub mod http_tool;
pub mod job_token;
pub mod ledger;
pub mod lifecycle;
pub mod limits;
pub mod network;
mod prefixed_id;
pub mod result_id;
pub mod secret;
pub mod tool;
pub mod validation;

pub use account::AccountId;
pub use agent::{
    AgentConfig, AgentId, AgentLimits, AgentName, BuiltinTool, ChannelSetting, OnDisconnect,
    Secrets, ToolKey, ToolSetting,
};
pub use conversation::{ConversationId, ConversationIdError};
pub use digest::Sha256Digest;
pub use effects::{RetryPolicy, RetrySpec, ToolEffects};
pub use egress::EgressAllowList;
pub use job_token::JobToken;
pub use ledger::{AttemptStatus, CallPath, ToolCallId};
pub use lifecycle::{CallStatus, StreamStatus, TurnStatus};
pub use limits::{AccountLimits, LimitKind, LimitOverrides};
pub use result_id::{ResultId, ResultIdError};
pub use secret::Secret;
pub use tool::{InputSchema, ToolConfig, ToolDescription, ToolId, ToolLimits, ToolName};
pub use validation::{refuse_nul, refuse_nul_text, ValidationError};
