//! The states of the detached async lifecycle and the moves between them.
//!
//! A detached turn (`async_turns.status`):
//! ```text
//! running ──▶ waiting ──▶ running ──▶ … ──▶ completed | failed
//!    └──────────────────────────────────────▶ completed | failed
//! ```
//! `running` while one of its runs (the first pass, or a group's
//! continuation) holds a claim; `waiting` while detached calls are out;
//! `completed` once a run ends with no group of the turn left open; `failed`
//! when a run fails, or a reaper gives up on it (the error says why). The
//! two terminal states are final: every write of a turn's status (in
//! `toolserver_store::async_turns`) applies only to a `running` or `waiting`
//! turn.
//!
//! A detached call (`async_tool_results.status`):
//! ```text
//! pending ──▶ completed | failed | cancelled | expired
//! ```
//! Only `pending` moves, once. `expired` covers both the hard deadline and a
//! missed heartbeat; a call whose runner stopped answering is `failed`.
//!
//! A dispatch group (the detached calls of one model pass):
//! `open ──▶ sealed ──▶ continued`; it continues exactly once, when sealed
//! with every call settled.

use std::fmt;

/// Where a detached turn stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(feature = "sqlx", sqlx(type_name = "text", rename_all = "lowercase"))]
pub enum TurnStatus {
    /// A run of the turn is under way.
    Running,
    /// Detached calls are out; a continuation will carry the turn on.
    Waiting,
    /// The turn ended; its messages are stored.
    Completed,
    /// The turn ended with an error.
    Failed,
}

impl TurnStatus {
    /// The column and wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// Whether the turn has ended for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

/// Where a detached call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(feature = "sqlx", sqlx(type_name = "text", rename_all = "lowercase"))]
pub enum CallStatus {
    /// Launched; no outcome yet.
    Pending,
    /// The tool returned a result.
    Completed,
    /// The tool failed, or its runner stopped before reporting.
    Failed,
    /// Stopped through `async_status`.
    Cancelled,
    /// Past its deadline, or its heartbeat deadline.
    Expired,
}

impl CallStatus {
    /// Every status, in the order of the lifecycle.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::Expired,
    ];

    /// The column and wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }
}

impl fmt::Display for TurnStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_completed_and_failed_turns_are_terminal() {
        assert!(TurnStatus::Completed.is_terminal() && TurnStatus::Failed.is_terminal());
        assert!(!TurnStatus::Running.is_terminal() && !TurnStatus::Waiting.is_terminal());
    }

    #[test]
    fn statuses_are_named_as_their_columns_hold_them() {
        let turns = [
            TurnStatus::Running,
            TurnStatus::Waiting,
            TurnStatus::Completed,
            TurnStatus::Failed,
        ];
        let names: Vec<String> = turns.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["running", "waiting", "completed", "failed"]);
        let calls = [
            CallStatus::Pending,
            CallStatus::Completed,
            CallStatus::Failed,
            CallStatus::Cancelled,
            CallStatus::Expired,
        ];
        let names: Vec<&str> = calls.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            ["pending", "completed", "failed", "cancelled", "expired"]
        );
    }
}
