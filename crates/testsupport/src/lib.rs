//! Helpers for integration tests: real services started on loopback, and a scripted model
//! speaking the OpenAI wire format (where a real model cannot run).
//! A helper that cannot start its service panics: the test cannot run without it.
#![allow(clippy::expect_used)]

pub mod bench;
pub mod http;
pub mod s3;
pub mod scripted_model;

pub use s3::S3Server;
pub use scripted_model::{Reply, ScriptedModel};
