//! How long a write waits for the disk. Postgres answers a commit once its
//! WAL is flushed (`synchronous_commit = on`); a write whose loss in a
//! crash of Postgres itself costs nothing a client was promised may skip
//! that wait (`off`): it is visible to every reader at once, flushed within
//! a fraction of a second, and any later commit that waits for the disk
//! flushes it too, since the WAL is written in order.
//!
//! A turn's start (its lease and the request's message) is such a write:
//! its client is promised nothing durable until the turn's end, which waits
//! (as does a detached turn's registration, answered only after it). Under
//! load, a write that waits queues behind every other account's flushes,
//! so skipping the wait is what keeps a turn's first byte from depending on
//! how much the rest of the server writes.

/// A common table expression, `unflushed`, that makes its statement's
/// transaction commit without waiting for the disk (`synchronous_commit =
/// off` for that transaction alone). Postgres evaluates it only if the
/// statement reads it, so the statement must (`FROM unflushed`).
pub(crate) const UNFLUSHED: &str =
    "unflushed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting)";
