//! The agent loop of toolserver: model providers, the per-turn tool
//! registry, the UI message stream a turn speaks, approvals, and async tool
//! work that the open request waits for.

pub mod approvals;
pub mod channels;
pub mod config_cache;
pub mod connections;
pub mod conversation;
pub mod engine;
pub mod fetch_grant;
pub mod handoff;
pub mod ledger;
pub mod lifecycle;
pub mod metrics;
pub mod outbound;
pub mod policy;
pub mod provider;
mod retry_after;
pub mod runner_call;
pub mod sealing;
pub mod stream;
pub mod submission;
pub mod tools;
mod trace_context;
pub mod turn;
pub mod ui;
pub mod webhooks;

pub use engine::{
    AgentLoadError, CheckedAgent, Harness, HarnessSettings, ProviderDefault, ProviderDefaults,
};
