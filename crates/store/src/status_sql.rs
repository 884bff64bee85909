//! The lifecycle states as SQL literals, built at compile time from the
//! enums that define them ([`toolserver_domain::lifecycle`], [`JobKind`]),
//! so no query spells a state by hand.
//!
//! A state a query picks at run time (a call's outcome) is bound as a
//! parameter; a state fixed in a query is spliced into its text from here.
//! That keeps the partial indexes in use: `async_turns_unfinished_idx`,
//! `async_turns_unsettled_idx` and `async_turns_open_idx` are defined
//! `WHERE status IN ('running', 'waiting')`, and
//! `async_tool_results_open_tasks_idx`, `async_tool_results_pending_expiry_idx`
//! and `async_tool_results_pending_alive_idx` `WHERE status = 'pending'`. The
//! planner uses such an index only for a query whose predicate it can prove
//! implies the index's: a literal does, a bound parameter does not once the
//! statement runs under a generic plan. Adding a state to
//! [`TurnStatus::UNFINISHED`] therefore needs a migration that redefines
//! those indexes (the tests below name the text they hold).

use toolserver_domain::{CallStatus, StreamStatus, TurnStatus};

use crate::job_kind::JobKind;

/// `('running', 'waiting')`: [`TurnStatus::UNFINISHED`], for `status IN …`.
pub(crate) const TURNS_UNFINISHED: &str = SqlText::turns(&TurnStatus::UNFINISHED).as_str();
/// `'running'`.
pub(crate) const TURN_RUNNING: &str = SqlText::literal(TurnStatus::Running.as_str()).as_str();
/// `'waiting'`.
pub(crate) const TURN_WAITING: &str = SqlText::literal(TurnStatus::Waiting.as_str()).as_str();

/// `'pending'`.
pub(crate) const CALL_PENDING: &str = SqlText::literal(CallStatus::Pending.as_str()).as_str();
/// `'cancelled'`.
pub(crate) const CALL_CANCELLED: &str = SqlText::literal(CallStatus::Cancelled.as_str()).as_str();
/// `'expired'`.
pub(crate) const CALL_EXPIRED: &str = SqlText::literal(CallStatus::Expired.as_str()).as_str();

/// `'active'`.
pub(crate) const STREAM_ACTIVE: &str = SqlText::literal(StreamStatus::Active.as_str()).as_str();
/// `'finished'`.
pub(crate) const STREAM_FINISHED: &str = SqlText::literal(StreamStatus::Finished.as_str()).as_str();

/// `'start'`.
pub(crate) const JOB_START: &str = SqlText::literal(JobKind::Start.as_str()).as_str();
/// `'continue'`.
pub(crate) const JOB_CONTINUE: &str = SqlText::literal(JobKind::Continue.as_str()).as_str();
/// `'relaunch'`.
pub(crate) const JOB_RELAUNCH: &str = SqlText::literal(JobKind::Relaunch.as_str()).as_str();

/// SQL text built in a constant; a text longer than its buffer fails the
/// build.
struct SqlText {
    bytes: [u8; 64],
    len: usize,
}

impl SqlText {
    const fn empty() -> Self {
        Self {
            bytes: [0; 64],
            len: 0,
        }
    }

    const fn push(mut self, text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            self.bytes[self.len] = bytes[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    /// `'name'`; a state's name is lowercase letters, so it needs no escape.
    const fn quoted(self, name: &str) -> Self {
        let bytes = name.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            assert!(
                bytes[i].is_ascii_lowercase(),
                "a state is lowercase letters"
            );
            i += 1;
        }
        self.push("'").push(name).push("'")
    }

    const fn literal(name: &str) -> Self {
        Self::empty().quoted(name)
    }

    /// `('a', 'b', …)`.
    const fn turns(statuses: &[TurnStatus]) -> Self {
        let mut text = Self::empty().push("(");
        let mut i = 0;
        while i < statuses.len() {
            if i > 0 {
                text = text.push(", ");
            }
            text = text.quoted(statuses[i].as_str());
            i += 1;
        }
        text.push(")")
    }

    const fn as_str(&self) -> &str {
        match std::str::from_utf8(self.bytes.split_at(self.len).0) {
            Ok(text) => text,
            Err(_) => panic!("SQL text is ASCII"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partial_indexes_predicates_are_the_texts_queries_splice() {
        assert_eq!(TURNS_UNFINISHED, "('running', 'waiting')");
        assert_eq!(CALL_PENDING, "'pending'");
    }

    #[test]
    fn every_literal_quotes_its_state() {
        let literals = [
            (TURN_RUNNING, "running"),
            (TURN_WAITING, "waiting"),
            (CALL_CANCELLED, "cancelled"),
            (CALL_EXPIRED, "expired"),
            (STREAM_ACTIVE, "active"),
            (STREAM_FINISHED, "finished"),
            (JOB_START, "start"),
            (JOB_CONTINUE, "continue"),
            (JOB_RELAUNCH, "relaunch"),
        ];
        for (literal, name) in literals {
            assert_eq!(literal, format!("'{name}'"));
        }
    }
}
