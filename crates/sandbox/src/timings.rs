//! Defaults of the runner timings every backend shares; each is a server
//! setting.

use std::time::Duration;

/// A runner without calls this long is stopped (`TOOLSERVER_RUNNER_IDLE_SECS`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a starting runner may take to listen
/// (`TOOLSERVER_RUNNER_START_TIMEOUT_MS`).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long past a call's deadline a silent runner is killed
/// (`TOOLSERVER_RUNNER_KILL_GRACE_MS`).
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
