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
//!
//! A turn's stream of UI chunks (`turn_streams.status`):
//! ```text
//! active ──▶ finished
//! ```
//! `active` while its recorder appends (or until another process finishes
//! it, once its recorder is taken for dead); `finished` once its last chunk
//! is recorded.
//!
//! Each enum's `as_str` spells its states as the columns hold them and the
//! API sends them (the serde and sqlx mappings are tested against it), and
//! the store's SQL names a state through it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a detached turn stands: `running`, `waiting` (on detached tool
/// calls), `completed` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
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
    /// Every status, in the order of the lifecycle.
    pub const ALL: [Self; 4] = [Self::Running, Self::Waiting, Self::Completed, Self::Failed];

    /// The statuses of a turn that has not ended: the one list every query
    /// for unfinished turns names.
    pub const UNFINISHED: [Self; 2] = [Self::Running, Self::Waiting];

    /// The column and wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// Whether the turn has ended for good.
    pub fn is_terminal(self) -> bool {
        !Self::UNFINISHED.contains(&self)
    }
}

/// Where a detached call stands: `pending`, then `completed`, `failed`,
/// `cancelled` or `expired`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
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
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }
}

/// Where a turn's stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(feature = "sqlx", sqlx(type_name = "text", rename_all = "lowercase"))]
pub enum StreamStatus {
    /// Chunks may still be appended.
    Active,
    /// Its last chunk is recorded.
    Finished,
}

impl StreamStatus {
    /// Every status, in the order of the lifecycle.
    pub const ALL: [Self; 2] = [Self::Active, Self::Finished];

    /// The column value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Finished => "finished",
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
        let names: Vec<String> = TurnStatus::ALL.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["running", "waiting", "completed", "failed"]);
        let names = CallStatus::ALL.map(CallStatus::as_str);
        assert_eq!(
            names,
            ["pending", "completed", "failed", "cancelled", "expired"]
        );
        assert_eq!(
            StreamStatus::ALL.map(StreamStatus::as_str),
            ["active", "finished"]
        );
    }

    #[test]
    fn the_wire_spells_statuses_as_the_columns_do() {
        for status in TurnStatus::ALL {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
            assert_eq!(serde_json::from_value::<TurnStatus>(json).unwrap(), status);
        }
        for status in CallStatus::ALL {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
            assert_eq!(serde_json::from_value::<CallStatus>(json).unwrap(), status);
        }
    }
}
