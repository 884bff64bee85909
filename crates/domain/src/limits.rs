//! What one account may use at once and per minute: the limits admission
//! holds every request to. Each has a deployment default (a server setting);
//! an operator may override any of them per account.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One kind of per-account limit, named as in errors, usage and overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// Runner calls in flight at once (direct invokes and MCP `tools/call`).
    ConcurrentCalls,
    /// Turns streaming at once (chat SSE, WebSocket, NATS and detached turns while they run).
    OpenTurns,
    /// Detached turns started and not yet completed or failed.
    PendingDetached,
    /// Runners alive at once.
    LiveRunners,
    /// MCP tasks not yet settled.
    McpTasks,
    /// Runner calls started per minute (a token bucket).
    CallsPerMinute,
    /// Runner calls the bucket lets through at once after a quiet spell.
    CallBurst,
    /// Turns started per minute (a token bucket).
    TurnsPerMinute,
    /// Turns the bucket lets through at once after a quiet spell.
    TurnBurst,
}

impl LimitKind {
    /// Every kind, in the order usage lists them.
    pub const ALL: [LimitKind; 9] = [
        Self::ConcurrentCalls,
        Self::OpenTurns,
        Self::PendingDetached,
        Self::LiveRunners,
        Self::McpTasks,
        Self::CallsPerMinute,
        Self::CallBurst,
        Self::TurnsPerMinute,
        Self::TurnBurst,
    ];

    /// The limit's name on the wire (`concurrentCalls`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::ConcurrentCalls => "concurrentCalls",
            Self::OpenTurns => "openTurns",
            Self::PendingDetached => "pendingDetached",
            Self::LiveRunners => "liveRunners",
            Self::McpTasks => "mcpTasks",
            Self::CallsPerMinute => "callsPerMinute",
            Self::CallBurst => "callBurst",
            Self::TurnsPerMinute => "turnsPerMinute",
            Self::TurnBurst => "turnBurst",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The limits in force for one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AccountLimits {
    /// [`LimitKind::ConcurrentCalls`].
    pub concurrent_calls: u32,
    /// [`LimitKind::OpenTurns`].
    pub open_turns: u32,
    /// [`LimitKind::PendingDetached`].
    pub pending_detached: u32,
    /// [`LimitKind::LiveRunners`].
    pub live_runners: u32,
    /// [`LimitKind::McpTasks`].
    pub mcp_tasks: u32,
    /// [`LimitKind::CallsPerMinute`].
    pub calls_per_minute: u32,
    /// [`LimitKind::CallBurst`].
    pub call_burst: u32,
    /// [`LimitKind::TurnsPerMinute`].
    pub turns_per_minute: u32,
    /// [`LimitKind::TurnBurst`].
    pub turn_burst: u32,
}

impl AccountLimits {
    /// The limits of an account without overrides unless the deployment's
    /// settings (`TOOLSERVER_ACCOUNT_*`) say otherwise.
    pub const DEFAULT: Self = Self {
        concurrent_calls: 16,
        open_turns: 64,
        pending_detached: 256,
        live_runners: 8,
        mcp_tasks: 64,
        calls_per_minute: 6000,
        call_burst: 600,
        turns_per_minute: 600,
        turn_burst: 100,
    };

    /// The value of one limit.
    pub fn get(&self, kind: LimitKind) -> u32 {
        match kind {
            LimitKind::ConcurrentCalls => self.concurrent_calls,
            LimitKind::OpenTurns => self.open_turns,
            LimitKind::PendingDetached => self.pending_detached,
            LimitKind::LiveRunners => self.live_runners,
            LimitKind::McpTasks => self.mcp_tasks,
            LimitKind::CallsPerMinute => self.calls_per_minute,
            LimitKind::CallBurst => self.call_burst,
            LimitKind::TurnsPerMinute => self.turns_per_minute,
            LimitKind::TurnBurst => self.turn_burst,
        }
    }

    /// These limits with `overrides` put over them.
    pub fn overridden_by(&self, overrides: &LimitOverrides) -> Self {
        let pick = |over: Option<u32>, default: u32| over.unwrap_or(default);
        Self {
            concurrent_calls: pick(overrides.concurrent_calls, self.concurrent_calls),
            open_turns: pick(overrides.open_turns, self.open_turns),
            pending_detached: pick(overrides.pending_detached, self.pending_detached),
            live_runners: pick(overrides.live_runners, self.live_runners),
            mcp_tasks: pick(overrides.mcp_tasks, self.mcp_tasks),
            calls_per_minute: pick(overrides.calls_per_minute, self.calls_per_minute),
            call_burst: pick(overrides.call_burst, self.call_burst),
            turns_per_minute: pick(overrides.turns_per_minute, self.turns_per_minute),
            turn_burst: pick(overrides.turn_burst, self.turn_burst),
        }
    }
}

/// An operator's per-account overrides; a missing (or `null`) field keeps
/// the deployment default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitOverrides {
    /// [`LimitKind::ConcurrentCalls`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_calls: Option<u32>,
    /// [`LimitKind::OpenTurns`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_turns: Option<u32>,
    /// [`LimitKind::PendingDetached`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_detached: Option<u32>,
    /// [`LimitKind::LiveRunners`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_runners: Option<u32>,
    /// [`LimitKind::McpTasks`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tasks: Option<u32>,
    /// [`LimitKind::CallsPerMinute`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_minute: Option<u32>,
    /// [`LimitKind::CallBurst`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_burst: Option<u32>,
    /// [`LimitKind::TurnsPerMinute`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns_per_minute: Option<u32>,
    /// [`LimitKind::TurnBurst`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_burst: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_what_they_name() {
        let overrides: LimitOverrides =
            serde_json::from_str(r#"{"concurrentCalls": 2, "turnBurst": null}"#).unwrap();
        let limits = AccountLimits::DEFAULT.overridden_by(&overrides);
        assert_eq!(limits.concurrent_calls, 2);
        assert_eq!(limits.turn_burst, 100);
        assert_eq!(limits.get(LimitKind::OpenTurns), 64);
    }

    #[test]
    fn unknown_override_names_are_refused() {
        let refused = serde_json::from_str::<LimitOverrides>(r#"{"concurrentCall": 2}"#);
        assert!(refused.unwrap_err().to_string().contains("concurrentCall"));
    }

    #[test]
    fn every_kind_reads_its_own_field() {
        let limits = AccountLimits::DEFAULT;
        let json = serde_json::to_value(limits).unwrap();
        for kind in LimitKind::ALL {
            assert_eq!(json[kind.name()], limits.get(kind), "{kind}");
        }
    }
}
