//! Resource limits of a local runner and how a call is held to them.
//!
//! Memory and processes are enforced by a cgroup per runner where the host
//! lets the server make one (cgroup v2, or the v1 `memory` and `pids`
//! hierarchies), else by the worker's rlimits (`RLIMIT_DATA`,
//! `RLIMIT_NPROC`); open files and file size always by rlimits
//! (`RLIMIT_NOFILE`, `RLIMIT_FSIZE`). CPU time per call and disk use are
//! checked while a call runs ([`CallWatch`]). A call that breaks a limit, or
//! whose runner hit one while it ran (a cgroup OOM kill, a refused fork, a
//! V8 heap exhaustion), ends in a `LimitExceeded` error naming the limit, and
//! the runner is killed and replaced. Disk use (and CPU time where no cgroup
//! of the runner counts it) is checked once more right after a call's
//! answer went out rather than before: a breach found then replaces the
//! runner before its next call, and the call keeps its answer.

mod cgroup;
mod spawn;
mod usage;
mod watch;

use std::fmt;
use std::time::Duration;

pub use cgroup::{CgroupSupport, RunnerCgroup};
pub use spawn::SpawnLimits;
pub use watch::{CallWatch, PendingChecks, Settling};

/// Per-runner resource limits; each is a server setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerLimits {
    /// Memory of the runner's processes together, in bytes.
    pub memory_bytes: u64,
    /// Processes and threads of the runner together.
    pub processes: u64,
    /// Open files per process.
    pub open_files: u64,
    /// Largest file a process may write, in bytes.
    pub file_size_bytes: u64,
    /// Disk the runner's directory (home, tmp, work, cache) may take, in
    /// bytes; every file counts at least one 4 KiB block.
    pub disk_bytes: u64,
    /// CPU time the runner may use while one call runs.
    pub cpu_per_call: Duration,
    /// How often CPU, disk and the cgroup counters are read during a call.
    pub check_interval: Duration,
}

impl RunnerLimits {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        memory_bytes: 512 * MIB,
        processes: 128,
        open_files: 256,
        file_size_bytes: 64 * MIB,
        disk_bytes: 256 * MIB,
        cpu_per_call: Duration::from_secs(120),
        check_interval: Duration::from_millis(250),
    };
}

impl Default for RunnerLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

const MIB: u64 = 1024 * 1024;

/// Which limit a call broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`RunnerLimits::memory_bytes`].
    Memory,
    /// [`RunnerLimits::processes`].
    Processes,
    /// [`RunnerLimits::disk_bytes`].
    Disk,
    /// [`RunnerLimits::cpu_per_call`].
    Cpu,
}

/// A broken limit, with what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitBreach {
    /// The limit.
    pub limit: Limit,
    /// What broke it, in words.
    pub detail: String,
}

impl LimitBreach {
    /// The error frame name of a breach.
    pub const ERROR_NAME: &'static str = "LimitExceeded";

    fn new(limit: Limit, detail: impl Into<String>) -> Self {
        Self {
            limit,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for LimitBreach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.limit {
            Limit::Memory => "memory",
            Limit::Processes => "process",
            Limit::Disk => "disk",
            Limit::Cpu => "CPU time",
        };
        write!(
            f,
            "the call exceeded the runner's {name} limit ({}); the runner was killed and will be replaced",
            self.detail
        )
    }
}

/// `n` bytes in MiB, for messages.
fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes / MIB)
}
