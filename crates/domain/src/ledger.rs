//! The tool-call ledger's closed sets: how an attempt of a call ended, and
//! which path made the call (`migrations/0021_tool_calls.sql`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::prefixed_id::prefixed_id;

prefixed_id!(
    /// One attempt of a tool call in the ledger, shown as `tcl_` followed
    /// by 32 hex characters.
    ToolCallId,
    "tcl_"
);

/// Where an attempt of a tool call stands. `Running` is the only state that
/// is not terminal; every attempt ends in exactly one of the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// The tool is running.
    Running,
    /// It returned an output.
    Ok,
    /// The tool itself failed (it threw, or its upstream answered an error).
    ToolError,
    /// The input was refused before anything ran.
    InputError,
    /// A person (or a policy) refused the call.
    Denied,
    /// A limit of the account refused the call before it ran.
    Throttled,
    /// It did not finish within its deadline.
    Timeout,
    /// It was stopped: its turn was stopped or its client went away.
    Cancelled,
    /// Its runner died or could not be reached.
    RunnerLost,
    /// It exceeded a sandbox limit (memory, output size, processes).
    LimitExceeded,
    /// An idempotent repeat answered with a stored result; nothing ran.
    Replayed,
    /// The server process running it died before its end was recorded: it
    /// may have run.
    ServerLost,
}

impl AttemptStatus {
    /// Every status.
    pub const ALL: [Self; 12] = [
        Self::Running,
        Self::Ok,
        Self::ToolError,
        Self::InputError,
        Self::Denied,
        Self::Throttled,
        Self::Timeout,
        Self::Cancelled,
        Self::RunnerLost,
        Self::LimitExceeded,
        Self::Replayed,
        Self::ServerLost,
    ];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::InputError => "input_error",
            Self::Denied => "denied",
            Self::Throttled => "throttled",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::RunnerLost => "runner_lost",
            Self::LimitExceeded => "limit_exceeded",
            Self::Replayed => "replayed",
            Self::ServerLost => "server_lost",
        }
    }

    /// The status named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == name)
    }

    /// Whether the attempt has ended.
    pub fn is_terminal(self) -> bool {
        self != Self::Running
    }
}

impl fmt::Display for AttemptStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which path made a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPath {
    /// An agent turn's inline call (streamed or detached turn).
    Turn,
    /// A detached call, completed through the completion route.
    Detached,
    /// `POST /accounts/me/tools/{toolId}/invoke`.
    Invoke,
    /// An MCP client's `tools/call`.
    Mcp,
}

impl CallPath {
    /// Every path.
    pub const ALL: [Self; 4] = [Self::Turn, Self::Detached, Self::Invoke, Self::Mcp];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Turn => "turn",
            Self::Detached => "detached",
            Self::Invoke => "invoke",
            Self::Mcp => "mcp",
        }
    }

    /// The path named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|path| path.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_json_and_parse() {
        for status in AttemptStatus::ALL {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
            assert_eq!(AttemptStatus::parse(status.as_str()), Some(status));
        }
        for path in CallPath::ALL {
            assert_eq!(serde_json::to_value(path).unwrap(), path.as_str());
            assert_eq!(CallPath::parse(path.as_str()), Some(path));
        }
        assert_eq!(AttemptStatus::parse("fine"), None);
    }

    #[test]
    fn the_migration_allows_exactly_these_statuses() {
        let migration = include_str!("../../../migrations/0021_tool_calls.sql");
        for status in AttemptStatus::ALL {
            assert!(
                migration.contains(&format!("'{}'", status.as_str())),
                "{status} is missing from the status check"
            );
        }
    }
}
