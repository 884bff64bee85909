//! Agents: an account-owned configuration of a model, its credentials, a
//! system prompt, a step limit and the tools it may call. Parsed once at save
//! time and again before every run; a parsed config is valid.

pub mod channels;
pub mod config;
mod endpoint;
mod id;
pub mod mcp;
mod secrets;
mod tools;

pub use channels::{ChannelSetting, CHANNEL_TYPES};
pub use config::{
    AgentConfig, AgentLimits, ModelSpec, OnDisconnect, ProviderCredentials, PROVIDERS,
};
pub use id::{AgentId, AgentName};
pub use secrets::{Secrets, REDACTED};
pub use tools::{BuiltinTool, ToolKey, ToolSetting, ASYNC_STATUS_TOOL, TOOL_FLAGS};
