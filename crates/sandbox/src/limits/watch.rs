//! Holds one call to its runner's limits: reads the runner's CPU time, disk
//! use and cgroup counters when the call starts, then every check interval
//! until it ends, and once more at the end.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::usage::{cpu_ticks, disk_use, process_tree};
use super::{mib, Limit, LimitBreach, RunnerCgroup, RunnerLimits};

/// The watch over one call.
#[derive(Debug)]
pub struct CallWatch {
    limits: RunnerLimits,
    /// The worker's process (the root of the runner's process tree).
    pid: Option<u32>,
    dir: PathBuf,
    cgroup: Option<Arc<RunnerCgroup>>,
    /// How often the worker reported V8 heap exhaustion, so far.
    heap_exhaustions: Arc<AtomicU64>,
    start: Counters,
    /// The runner's CPU ticks at the latest read.
    latest_cpu_ticks: AtomicU64,
}

/// Counters read at the start of the call.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    cpu_ticks: u64,
    oom_kills: u64,
    refused_forks: u64,
    heap_exhaustions: u64,
}

impl CallWatch {
    /// Starts watching a call on the runner whose worker is `pid`, whose
    /// directory is `dir`, in `cgroup`.
    pub fn start(
        limits: RunnerLimits,
        pid: Option<u32>,
        dir: PathBuf,
        cgroup: Option<Arc<RunnerCgroup>>,
        heap_exhaustions: Arc<AtomicU64>,
    ) -> Self {
        let mut watch = Self {
            limits,
            pid,
            dir,
            cgroup,
            heap_exhaustions,
            start: Counters::default(),
            latest_cpu_ticks: AtomicU64::new(0),
        };
        watch.start = watch.counters();
        watch
            .latest_cpu_ticks
            .store(watch.start.cpu_ticks, Ordering::Relaxed);
        watch
    }

    /// The runner's processes: its own cgroup's, else the worker's tree.
    fn processes(&self) -> Vec<u32> {
        match (
            self.cgroup.as_ref().and_then(|group| group.pids()),
            self.pid,
        ) {
            (Some(pids), _) => pids,
            (None, Some(pid)) => process_tree(pid),
            (None, None) => Vec::new(),
        }
    }

    fn counters(&self) -> Counters {
        Counters {
            cpu_ticks: cpu_ticks(&self.processes()),
            oom_kills: self.cgroup.as_ref().map_or(0, |group| group.oom_kills()),
            refused_forks: self
                .cgroup
                .as_ref()
                .map_or(0, |group| group.refused_forks()),
            heap_exhaustions: self.heap_exhaustions.load(Ordering::SeqCst),
        }
    }

    /// The limit the call has broken so far, if any (reads `/proc`, the
    /// cgroup and the runner's directory: call it off the async threads).
    pub fn check(&self) -> Option<LimitBreach> {
        let now = self.counters();
        let limits = &self.limits;
        if now.oom_kills > self.start.oom_kills
            || now.heap_exhaustions > self.start.heap_exhaustions
        {
            return Some(LimitBreach::new(Limit::Memory, mib(limits.memory_bytes)));
        }
        if now.refused_forks > self.start.refused_forks {
            let detail = format!("{} processes and threads", limits.processes);
            return Some(LimitBreach::new(Limit::Processes, detail));
        }
        self.latest_cpu_ticks
            .store(now.cpu_ticks, Ordering::Relaxed);
        if self.cpu_used() > limits.cpu_per_call {
            let detail = format!("{} ms per call", limits.cpu_per_call.as_millis());
            return Some(LimitBreach::new(Limit::Cpu, detail));
        }
        if disk_use(&self.dir, limits.disk_bytes) > limits.disk_bytes {
            return Some(LimitBreach::new(Limit::Disk, mib(limits.disk_bytes)));
        }
        None
    }

    /// CPU time the runner used from the call's start to the latest read.
    pub fn cpu_used(&self) -> Duration {
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        let ticks = self
            .latest_cpu_ticks
            .load(Ordering::Relaxed)
            .saturating_sub(self.start.cpu_ticks);
        Duration::from_millis(ticks * 1000 / per_second)
    }

    /// Resolves with the first breach seen while the call runs.
    pub async fn breached(self: Arc<Self>) -> LimitBreach {
        loop {
            tokio::time::sleep(self.limits.check_interval).await;
            let watch = self.clone();
            if let Ok(Some(breach)) = tokio::task::spawn_blocking(move || watch.check()).await {
                return breach;
            }
        }
    }

    /// The breach the call left behind, checked once it ended.
    pub async fn after(self: Arc<Self>) -> Option<LimitBreach> {
        tokio::task::spawn_blocking(move || self.check())
            .await
            .ok()
            .flatten()
    }
}
