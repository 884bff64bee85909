//! The local-process executor with real Node workers.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod calls;
mod exits;
mod isolation;
mod lifecycle;
mod limits;
mod support;
