//! Holds one call to its runner's limits, off the call's path.
//!
//! - **Start.** The counters the call is measured from (the runner's CPU
//!   time, its cgroup's OOM kills and refused forks, the worker's V8 heap
//!   exhaustions) are read in a blocking task started with the call; the
//!   call does not wait for them.
//! - **While it runs.** Every check interval, every limit is checked in a
//!   blocking task.
//! - **When it ends.** A call the worker answered is checked for what is
//!   cheap to tell before its terminal frame goes out: memory (OOM kills,
//!   heap exhaustions), processes (refused forks) and, where the runner's
//!   own cgroup counts it, CPU (one counter file). The rest (disk, which
//!   walks the runner's directory, and CPU where it is read from `/proc`)
//!   is checked right after the frame ([`Settling`]), and the runner's next
//!   call waits for that ([`PendingChecks`]): a breach found then kills the
//!   worker (a disk breach also empties its directories) before the runner
//!   serves another call, while the call that caused it keeps its answer. A
//!   call that ended any other way (deadline, crash, refusal) is checked in
//!   full before its error frame, as its worker is not kept anyway.
//!
//! CPU time comes from the runner's own cgroup where it has one that counts
//! it (v1 `cpuacct.usage`, v2 `cpu.stat`); else from `/proc/<pid>/stat` of
//! its processes (those of its cgroup, or the worker's process tree).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

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
    /// The runner's checks still running after their calls answered.
    pending: Arc<PendingChecks>,
    /// The counters at the call's start, once read.
    start: watch::Receiver<Option<Counters>>,
    /// The runner's CPU time at the latest read, in nanoseconds.
    latest_cpu: AtomicU64,
}

/// Counters of the runner, read together.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    /// `None` where reading it takes more than one cgroup file and it was
    /// not asked for.
    cpu: Option<Duration>,
    oom_kills: u64,
    refused_forks: u64,
    heap_exhaustions: u64,
}

impl CallWatch {
    /// Starts watching a call on the runner whose worker is `pid`, whose
    /// directory is `dir`, in `cgroup`; its starting counters are read in
    /// the background. Checks left after the call answered count in
    /// `pending`.
    pub fn start(
        limits: RunnerLimits,
        pid: Option<u32>,
        dir: PathBuf,
        cgroup: Option<Arc<RunnerCgroup>>,
        heap_exhaustions: Arc<AtomicU64>,
        pending: Arc<PendingChecks>,
    ) -> Arc<Self> {
        let (started, start) = watch::channel(None);
        let watch = Arc::new(Self {
            limits,
            pid,
            dir,
            cgroup,
            heap_exhaustions,
            pending,
            start,
            latest_cpu: AtomicU64::new(0),
        });
        let reading = watch.clone();
        tokio::task::spawn_blocking(move || {
            let counters = reading.counters(true);
            reading.record_cpu(counters.cpu);
            started.send_replace(Some(counters));
        });
        watch
    }

    /// The counters the call started from, once read.
    async fn start_counters(&self) -> Option<Counters> {
        let mut start = self.start.clone();
        let seen = start.wait_for(Option::is_some).await.ok()?;
        *seen
    }

    /// The runner's CPU time: from its cgroup's counter where one counts
    /// it, else (only if `from_proc`) from `/proc`.
    fn cpu_time(&self, from_proc: bool) -> Option<Duration> {
        if let Some(used) = self.cgroup.as_ref().and_then(|group| group.cpu_time()) {
            return Some(used);
        }
        if !from_proc {
            return None;
        }
        let processes = match (
            self.cgroup.as_ref().and_then(|group| group.pids()),
            self.pid,
        ) {
            (Some(pids), _) => pids,
            (None, Some(pid)) => process_tree(pid),
            (None, None) => Vec::new(),
        };
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        Some(Duration::from_millis(
            cpu_ticks(&processes) * 1000 / per_second,
        ))
    }

    /// Reads the counters; CPU read from `/proc` only if `from_proc`.
    fn counters(&self, from_proc: bool) -> Counters {
        Counters {
            cpu: self.cpu_time(from_proc),
            oom_kills: self.cgroup.as_ref().map_or(0, |group| group.oom_kills()),
            refused_forks: self
                .cgroup
                .as_ref()
                .map_or(0, |group| group.refused_forks()),
            heap_exhaustions: self.heap_exhaustions.load(Ordering::SeqCst),
        }
    }

    fn record_cpu(&self, cpu: Option<Duration>) {
        if let Some(cpu) = cpu {
            let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
            self.latest_cpu.store(nanos, Ordering::Relaxed);
        }
    }

    /// The memory, process or CPU limit broken between `start` and `now`.
    fn broken_by(&self, start: &Counters, now: &Counters) -> Option<LimitBreach> {
        let limits = &self.limits;
        if now.oom_kills > start.oom_kills || now.heap_exhaustions > start.heap_exhaustions {
            return Some(LimitBreach::new(Limit::Memory, mib(limits.memory_bytes)));
        }
        if now.refused_forks > start.refused_forks {
            let detail = format!("{} processes and threads", limits.processes);
            return Some(LimitBreach::new(Limit::Processes, detail));
        }
        self.record_cpu(now.cpu);
        let used = now
            .cpu
            .zip(start.cpu)
            .map(|(now, start)| now.saturating_sub(start));
        if used.is_some_and(|used| used > limits.cpu_per_call) {
            let detail = format!("{} ms per call", limits.cpu_per_call.as_millis());
            return Some(LimitBreach::new(Limit::Cpu, detail));
        }
        None
    }

    /// Every limit the call has broken since `start` (reads `/proc`, the
    /// cgroup and the runner's directory: call it off the async threads).
    fn check(&self, start: &Counters) -> Option<LimitBreach> {
        if let Some(breach) = self.broken_by(start, &self.counters(true)) {
            return Some(breach);
        }
        let limits = &self.limits;
        (disk_use(&self.dir, limits.disk_bytes) > limits.disk_bytes)
            .then(|| LimitBreach::new(Limit::Disk, mib(limits.disk_bytes)))
    }

    /// Checks every limit in a blocking task.
    async fn check_off_thread(self: &Arc<Self>) -> Option<LimitBreach> {
        let start = self.start_counters().await?;
        let watch = self.clone();
        tokio::task::spawn_blocking(move || watch.check(&start))
            .await
            .ok()
            .flatten()
    }

    /// CPU time the runner used from the call's start to the latest read.
    pub fn cpu_used(&self) -> Duration {
        let start = self.start.borrow().and_then(|start| start.cpu);
        let Some(start) = start else {
            return Duration::ZERO;
        };
        Duration::from_nanos(self.latest_cpu.load(Ordering::Relaxed)).saturating_sub(start)
    }

    /// Resolves with the first breach seen while the call runs.
    pub async fn breached(self: Arc<Self>) -> LimitBreach {
        loop {
            tokio::time::sleep(self.limits.check_interval).await;
            if let Some(breach) = self.check_off_thread().await {
                return breach;
            }
        }
    }

    /// The breach a call the worker answered left behind, among those cheap
    /// to tell (cgroup counter files, no `/proc` or directory walk): checked
    /// before its terminal frame goes out.
    pub async fn answered(&self) -> Option<LimitBreach> {
        let start = self.start_counters().await?;
        self.broken_by(&start, &self.counters(false))
    }

    /// The breach a call that ended without an answer left behind, of any
    /// limit.
    pub async fn after(self: Arc<Self>) -> Option<LimitBreach> {
        self.check_off_thread().await
    }

    /// Checks the rest of an answered call's limits after its terminal
    /// frame; the runner's next call waits until the returned check is
    /// dropped. Take it before the frame goes out.
    pub fn settle(self: Arc<Self>) -> Settling {
        self.pending.running.send_modify(|running| *running += 1);
        Settling { watch: self }
    }
}

/// The rest of an answered call's check, run after its terminal frame.
#[derive(Debug)]
pub struct Settling {
    watch: Arc<CallWatch>,
}

impl Settling {
    /// The limit the call broke, of any (reads the runner's directory, in a
    /// blocking task).
    pub async fn breach(&self) -> Option<LimitBreach> {
        self.watch.check_off_thread().await
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        self.watch
            .pending
            .running
            .send_modify(|running| *running = running.saturating_sub(1));
    }
}

/// One runner's checks of calls that already answered; its next call waits
/// for them, so a breach they find stops the runner before it serves again.
#[derive(Debug)]
pub struct PendingChecks {
    running: watch::Sender<usize>,
}

impl Default for PendingChecks {
    fn default() -> Self {
        Self {
            running: watch::Sender::new(0),
        }
    }
}

impl PendingChecks {
    /// Resolves once no check is running.
    pub async fn settled(&self) {
        if *self.running.borrow() == 0 {
            return;
        }
        let _ = self
            .running
            .subscribe()
            .wait_for(|running| *running == 0)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch over this process, without a cgroup, on `dir`.
    fn watch_over(dir: &std::path::Path, disk_bytes: u64) -> (Arc<CallWatch>, Arc<PendingChecks>) {
        let limits = RunnerLimits {
            disk_bytes,
            ..RunnerLimits::default()
        };
        let pending = Arc::new(PendingChecks::default());
        let watch = CallWatch::start(
            limits,
            Some(std::process::id()),
            dir.to_path_buf(),
            None,
            Arc::new(AtomicU64::new(0)),
            pending.clone(),
        );
        (watch, pending)
    }

    #[tokio::test]
    async fn disk_is_checked_after_the_answer_while_the_next_call_waits() {
        let dir = tempfile::tempdir().unwrap();
        let (watch, pending) = watch_over(dir.path(), 64 * 1024);
        std::fs::write(dir.path().join("fill"), vec![7u8; 256 * 1024]).unwrap();
        assert_eq!(
            watch.answered().await,
            None,
            "no directory walk before the answer"
        );
        let settling = watch.clone().settle();
        let next_call = tokio::spawn({
            let pending = pending.clone();
            async move { pending.settled().await }
        });
        let breach = settling.breach().await.map(|breach| breach.limit);
        assert_eq!(breach, Some(Limit::Disk));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !next_call.is_finished(),
            "the next call waits for the check"
        );
        drop(settling);
        next_call.await.unwrap();
        pending.settled().await;
    }

    #[tokio::test]
    async fn cpu_without_a_cgroup_is_read_from_proc_after_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let (watch, _) = watch_over(dir.path(), u64::MAX);
        assert_eq!(
            watch
                .start_counters()
                .await
                .map(|start| start.cpu.is_some()),
            Some(true)
        );
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(50) {}
        assert_eq!(watch.answered().await, None);
        assert_eq!(
            watch.cpu_used(),
            Duration::ZERO,
            "not read before the answer"
        );
        assert_eq!(watch.clone().settle().breach().await, None);
        assert!(watch.cpu_used() > Duration::ZERO, "read after it");
    }
}
