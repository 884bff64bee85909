//! One module per resource, each exposing its routes; merged in [`crate::api_router`].

pub mod accounts;
pub mod agents;
pub mod approvals;
pub mod bundles;
pub mod channels;
pub mod connections;
pub mod conversations;
pub mod health;
pub mod operator;
pub mod policies;
pub mod runner_fetch;
pub mod sandbox_jobs;
pub mod secrets;
pub mod tool_calls;
pub mod tools;
