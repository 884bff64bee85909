//! Tests of the toolserver program: the embedded database, crash safety
//! (of detached turns and of keyed direct calls), the kubernetes executor
//! behind the unchanged API, runner isolation at start, bad settings
//! refused at start, the settings reference and the settings packaging
//! files refer to, the generated routes page, and upgrades with work in
//! flight.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod chaos;
mod crash;
mod egress_proxy;
mod embedded;
mod interrupted;
mod invoke_crash;
mod isolation;
mod kubernetes;
mod mcp_tasks;
mod metrics;
mod refusals;
mod routes_docs;
mod runner_exits;
mod serve;
mod server;
mod settings;
mod stream_failover;
mod traces;
mod upgrade;
