//! Detached async calls: on paths where no request waits (`/async`, NATS),
//! an uploaded async tool is launched on its runner, which reports the
//! outcome through the completion route; the turn does not wait for it.

use async_trait::async_trait;
use serde_json::Value;

use crate::tools::RegisteredTool;

/// One detached call of a pass, ready to record.
pub struct DetachedCall<'a> {
    /// The model's call id.
    pub tool_call_id: &'a str,
    /// The tool called.
    pub tool: &'a RegisteredTool,
    /// Its checked input.
    pub input: &'a Value,
}

/// Where a detached turn records its launched calls.
#[async_trait]
pub trait Detacher: Send + Sync {
    /// Records every detached call of one pass at once, before any is
    /// launched; returns each call's status id and the `async` metadata
    /// for its runner, in order.
    async fn register_pass(
        &self,
        calls: &[DetachedCall<'_>],
    ) -> Result<Vec<(String, Value)>, String>;

    /// Settles a registered call that ended at its launch: it never
    /// launched (`Err`), or its runner ran it to the end at once (`Ok`).
    async fn ended_at_launch(&self, status_id: &str, outcome: Result<Value, String>);
}

/// `async_status` over durable detached calls of the caller's account.
#[async_trait]
pub trait DurableStatus: Send + Sync {
    /// Answers `action` (`status`, `logs` or `stop`) for `status_id`;
    /// `None` when the account has no such call.
    async fn answer(&self, status_id: &str, action: &str) -> Option<Result<Value, String>>;
}
