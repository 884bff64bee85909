//! Helpers for integration tests: real services started on loopback, a scripted model
//! speaking the OpenAI, Anthropic and Gemini wire formats (where a real model cannot
//! run), and a fake Kubernetes API server whose pods run as local processes (where no
//! cluster can run); and what
//! every test binary needs of a running server: free ports, waiting, tool uploads and
//! invocations, the clients' directories.
//! A helper that cannot start its service panics: the test cannot run without it.
#![allow(clippy::expect_used)]

pub mod bench;
pub mod clients;
pub mod drift;
pub mod fixtures;
pub mod http;
pub mod kube;
pub mod net;
pub mod oauth_server;
pub mod protected_mcp;
pub mod s3;
pub mod scripted_model;
pub mod server_env;
pub mod tools;
pub mod wait;

pub use kube::FakeCluster;
pub use oauth_server::OAuthServer;
pub use s3::S3Server;
pub use scripted_model::{Reply, ScriptedModel};
