//! Detached async calls: on paths where no request waits (`/async`, NATS),
//! an uploaded async tool is launched on its runner, which reports the
//! outcome through the completion route; the turn does not wait for it.

use async_trait::async_trait;
use serde_json::Value;
use toolserver_domain::ToolId;

/// Where a detached turn records its launched calls.
#[async_trait]
pub trait Detacher: Send + Sync {
    /// Registers a call of `tool_name` in this pass's dispatch group and
    /// returns its status id and the `async` metadata for the runner.
    async fn register(
        &self,
        tool_call_id: &str,
        tool_name: &str,
        tool_id: Option<ToolId>,
    ) -> Result<(String, Value), String>;

    /// Settles a registered call whose runner never launched it as failed,
    /// so its group does not wait for it until it expires.
    async fn launch_failed(&self, status_id: &str, error: &str);

    /// Seals this pass's group, if it has calls; returns whether it had.
    async fn seal_pass(&self) -> Result<bool, String>;
}

/// `async_status` over durable detached calls of the caller's account.
#[async_trait]
pub trait DurableStatus: Send + Sync {
    /// Answers `action` (`status`, `logs` or `stop`) for `status_id`;
    /// `None` when the account has no such call.
    async fn answer(&self, status_id: &str, action: &str) -> Option<Result<Value, String>>;
}
