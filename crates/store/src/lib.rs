//! Postgres persistence for toolserver. Every query that touches a tenant's
//! data takes the [`AccountId`](toolserver_domain::AccountId) and filters by
//! it, so another account's rows are indistinguishable from missing ones.

pub mod account_limits;
pub mod account_secrets;
pub mod account_usage;
pub mod accounts;
pub mod agents;
pub mod approvals;
pub mod async_results;
pub mod async_turns;
pub mod channel_events;
mod commit;
pub mod config_changes;
pub mod conversation_messages;
pub mod conversations;
pub mod dedicated;
pub mod error;
pub mod handoffs;
pub mod invoke_keys;
mod job_kind;
pub mod jobs;
pub mod mcp_tasks;
pub mod notified;
pub mod oauth_authorizations;
pub mod oauth_connections;
pub mod oauth_providers;
pub mod policies;
pub mod pool;
pub mod processes;
pub mod scoped_policies;
pub mod stats;
mod status_sql;
pub mod text;
pub mod tool_calls;
pub mod tools;
pub mod turn_end;
pub mod turn_streams;
pub mod webhook_deliveries;

pub use agents::{AgentRecord, AgentWrite};
pub use conversations::ConversationRecord;
pub use dedicated::{DedicatedConnections, DedicatedSettings};
pub use error::StoreError;
pub use pool::{connect, migrate, PoolSettings, Unpooled, MIGRATOR};
pub use tools::{NewTool, ToolBody, ToolPatch, ToolRecord};
