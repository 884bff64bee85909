//! Tests of the toolserver program: the embedded database, and the settings
//! that packaging files and the README refer to.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod crash;
mod embedded;
mod serve;
mod settings;
