//! The local-process executor with real Node workers.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod budget;
mod calls;
mod exits;
mod fair_cpu;
mod isolation;
mod lifecycle;
mod limits;
mod pool;
mod support;
