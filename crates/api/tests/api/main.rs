//! Integration tests of the HTTP API against real Postgres (one database per
//! test, created by `sqlx::test`), a real bundle store (filesystem, or S3 on
//! a real `s3s-fs`), and real token verification.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod admission;
mod agents;
mod app;
mod approvals;
mod auth;
mod browser;
mod bundles;
mod chat;
mod chunk_log;
mod chunk_rows;
mod chunk_stores;
mod cli;
mod completion;
mod connections;
mod contract;
mod contract_rules;
mod detached;
mod fake_tavily;
mod http_tools;
mod idempotent_invoke;
mod invoke;
mod ledger;
mod lifecycle;
mod mcp;
mod mcp_python;
mod openapi;
mod policies;
mod real_client;
mod resume;
mod shutdown;
mod socket;
mod stored_shapes;
mod support;
mod tenancy;
mod tool_cache;
mod tool_effects;
mod tools;
mod turn_config;
mod validation;
mod webhook_receiver;
