//! The store on its own against real Postgres (one database per test,
//! created by `sqlx::test` from `migrations/`): every query that moves a
//! lifecycle state, the races where two writers meet on one row, and
//! tenancy (another account's row is missing to it). Assertions read the
//! stored rows, not only what a query returned.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod account_limits;
mod async_results;
mod async_turns;
mod channel_events;
mod conversation_messages;
mod conversations;
mod dedicated;
mod handoffs;
mod invoke_keys;
mod jobs;
mod mcp_tasks;
mod notifications;
mod pool;
mod support;
mod tool_calls;
mod turn_end;
mod turn_streams;
