//! Helpers for integration tests: real services started on loopback.
//! A helper that cannot start its service panics: the test cannot run without it.
#![allow(clippy::expect_used)]

pub mod s3;

pub use s3::S3Server;
