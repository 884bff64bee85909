//! Caches kept current by Postgres notifications: a [`NotifiedMap`] holds
//! rows read before, and the process's listener ([`Notifications`], one
//! connection for every part that follows notices) drops the entries a
//! trigger's `pg_notify` names.
//!
//! An entry is trusted only while its listener is connected: nothing is
//! cached or served otherwise, and everything cached is dropped whenever
//! the connection is made or lost (notices may have been missed). A read
//! that raced a change is not kept: every drop bumps a generation, and a
//! read is stored only if none happened since it began. A process that
//! makes a change itself drops the entry at once, before answering.

mod listener;
mod map;

pub use listener::{Listening, Notifications, Notified, LISTENER_APPLICATION_NAME};
pub use map::NotifiedMap;
