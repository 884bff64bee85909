//! The executor abstraction every runner backend implements.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use toolserver_domain::AccountId;

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

/// A detached call a runner's worker had launched and not yet finished.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchedCall {
    /// The call's id, as sent.
    pub call_id: String,
    /// The async metadata it was launched with (the caller's own).
    pub async_meta: Value,
}

/// A runner's worker that exited, and the detached calls it took with it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerExit {
    /// The runner's name.
    pub runner: String,
    /// How the worker ended, in words a model can read (e.g. "killed by
    /// signal 9 (SIGKILL)").
    pub cause: String,
    /// The detached calls it was still running (or delivering the outcome
    /// of); their outcomes will not come.
    pub calls: Vec<LaunchedCall>,
}

/// What one account's runners use, as this process counts it: `cpu` and
/// `egress_bytes` only grow from the process's start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunnerUsage {
    /// The account's runners live now.
    pub live_runners: usize,
    /// CPU time its runners used.
    pub cpu: Duration,
    /// Bytes the egress proxy carried for its runners, both ways.
    pub egress_bytes: u64,
}

/// Told, at once and before any successor starts, that the runner for a key
/// stopped by its backend's own doing (idle reaping, its worker's exit).
pub type StopListener = Arc<dyn Fn(&ReservationKey) + Send + Sync>;

/// A budget's hold on a backend's warm runners (started ahead of demand,
/// of no account until claimed): each counts against the budget from the
/// moment its start is decided until it is claimed or discarded.
pub trait WarmRoom: Send + Sync + 'static {
    /// Takes room for one more warm runner; `false` when there is none.
    fn take(&self) -> bool;

    /// Gives back the room of a warm runner that was claimed (its runner
    /// counts from then on) or discarded.
    fn give_back(&self);
}

/// Where a backend's warm pool keeps the [`WarmRoom`] that governs it:
/// empty until a budget takes the backend, and every start has room then.
#[derive(Default)]
pub struct WarmRoomSlot(Mutex<Option<Arc<dyn WarmRoom>>>);

impl WarmRoomSlot {
    /// Lets `room` account for warm runners from now on.
    pub fn govern(&self, room: Arc<dyn WarmRoom>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(room);
    }

    /// Takes room for one more warm runner (always, with no budget).
    pub fn take(&self) -> bool {
        self.room().is_none_or(|room| room.take())
    }

    /// Gives back the room of a warm runner claimed or discarded.
    pub fn give_back(&self) {
        if let Some(room) = self.room() {
            room.give_back();
        }
    }

    fn room(&self) -> Option<Arc<dyn WarmRoom>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
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

    /// The exits of workers that still ran detached calls, as this process
    /// sees them happen. A backend that cannot see its workers exit (the
    /// default) answers a closed channel; their calls are then settled when
    /// their runner's pings stop.
    fn exits(&self) -> broadcast::Receiver<RunnerExit> {
        broadcast::channel(1).1
    }

    /// Stops the runner for `key` unless it is busy (a call in flight, or
    /// its worker still runs detached calls); `true` when it is not running
    /// now. The default stops nothing: a backend that cannot tell keeps its
    /// runners.
    async fn stop_if_idle(&self, key: &ReservationKey) -> Result<bool, SandboxError> {
        let _ = key;
        Ok(false)
    }

    /// What `account`'s runners used (the default counts nothing).
    fn usage(&self, account: &AccountId) -> RunnerUsage {
        let _ = account;
        RunnerUsage::default()
    }

    /// What this backend cannot do on this host, in words an operator can
    /// act on (the default: nothing to say).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// What every account's runners used, for each account whose runners
    /// ran in this process (the default counts nothing).
    fn usage_all(&self) -> Vec<(AccountId, RunnerUsage)> {
        Vec::new()
    }

    /// Lets `room` account for this backend's warm runners from now on (the
    /// default: a backend without warm runners ignores it).
    fn govern_warm(&self, room: Arc<dyn WarmRoom>) {
        let _ = room;
    }

    /// Discards one warm runner to make room for an account's; `false`
    /// when there is none (the default).
    async fn shed_warm(&self) -> bool {
        false
    }

    /// Registers `listener` for the runners this backend stops by itself
    /// (the default reports none; a runner it stopped then counts as live
    /// for a budget until the budget stops it).
    fn watch_stops(&self, listener: StopListener) {
        let _ = listener;
    }
}
