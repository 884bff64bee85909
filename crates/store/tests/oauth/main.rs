//! OAuth providers, connections and authorizations against real Postgres
//! (one database per test, created by `sqlx::test` from `migrations/`):
//! registering and replacing providers, keeping and refreshing a user's
//! tokens (one refresh at a time) and the refresh sweep, authorizations
//! found by their state, completed once, and the turns that wait on them
//! resumed; and tenancy (another account's rows are missing to it).
//! Assertions read the stored rows, not only what a query returned.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod authorizations;
mod connections;
mod providers;
mod support;
