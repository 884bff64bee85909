//! The executor abstraction every runner backend implements.

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::{Frame, InvokeRequest, ReservationKey, SandboxError};

/// Frames of one call, in order; the last one received is terminal.
pub type FrameStream = mpsc::Receiver<Frame>;

/// What `ensure` found or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerInfo {
    /// The deterministic runner name.
    pub name: String,
    /// False when an already-running runner was reused.
    pub started: bool,
}

/// Runs tool calls in runners addressed by reservation key.
#[async_trait]
pub trait Executor: Send + Sync + 'static {
    /// Makes sure the runner for `key` is up and healthy, starting it if needed.
    async fn ensure(&self, key: &ReservationKey) -> Result<RunnerInfo, SandboxError>;

    /// Runs one call on the runner for `key` and streams its frames. Errors of
    /// the tool arrive as an `error` frame; `Err` means no call could be made.
    async fn invoke(
        &self,
        key: &ReservationKey,
        request: InvokeRequest,
    ) -> Result<FrameStream, SandboxError>;

    /// Asks the runner to abort a call; `false` when it was not running.
    async fn cancel(&self, key: &ReservationKey, call_id: &str) -> Result<bool, SandboxError>;

    /// The kept log lines of a background (detached) call.
    async fn logs(&self, key: &ReservationKey, call_id: &str) -> Result<Value, SandboxError>;

    /// Stops the runner for `key` (its cache survives for the next start).
    async fn stop(&self, key: &ReservationKey) -> Result<(), SandboxError>;
}
