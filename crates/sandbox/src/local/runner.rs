//! One runner as this backend holds it: its directory, its worker and
//! what its calls left behind.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};

use super::process::WorkerProcess;
use crate::limits::RunnerCgroup;
use crate::{EgressScope, PendingChecks, ReservationKey};

/// The worker's socket, in its directory.
pub(super) const WORKER_SOCKET: &str = "worker.sock";

/// The egress proxy's socket, in a worker's directory.
pub(super) const EGRESS_SOCKET: &str = "egress.sock";

pub(super) struct Runner {
    pub(super) key: ReservationKey,
    pub(super) name: String,
    pub(super) dir: PathBuf,
    /// Whose traffic the runner's egress socket carries.
    pub(super) egress: EgressScope,
    /// The egress socket's listener, once served.
    pub(super) egress_listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Held while its worker is started, replaced or stopped for idling.
    pub(super) starting: tokio::sync::Mutex<()>,
    /// Its worker, once started (it may have exited since). Read without
    /// `starting`, so [`Runner::kill`] never waits for a worker to start.
    pub(super) worker: Mutex<Option<Arc<WorkerProcess>>>,
    pub(super) last_used: Mutex<Instant>,
    pub(super) inflight: AtomicUsize,
    /// The runner's cgroup, as its last worker started.
    pub(super) cgroup: Mutex<Option<Arc<RunnerCgroup>>>,
    /// How often its worker reported V8 heap exhaustion (a claimed warm
    /// worker brings the counter it was started with).
    pub(super) heap_exhaustions: Mutex<Arc<AtomicU64>>,
    /// Limit checks of its calls that already answered; a new call waits
    /// for them.
    pub(super) pending_checks: Arc<PendingChecks>,
    /// The runner's own (uid, gid), once its directories were prepared.
    pub(super) ids: Mutex<Option<(u32, u32)>>,
}

impl Runner {
    /// The runner's own (uid, gid), when it runs as one.
    pub(super) fn ids(&self) -> Option<(u32, u32)> {
        self.ids.lock().ok().and_then(|ids| *ids)
    }

    pub(super) fn socket(&self) -> PathBuf {
        self.dir.join(WORKER_SOCKET)
    }

    pub(super) fn egress_socket(&self) -> PathBuf {
        self.dir.join(EGRESS_SOCKET)
    }

    pub(super) fn touch(&self) {
        if let Ok(mut at) = self.last_used.lock() {
            *at = Instant::now();
        }
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default()
    }

    /// The counter of its worker's V8 heap exhaustions.
    pub(super) fn heap_counter(&self) -> Arc<AtomicU64> {
        self.heap_exhaustions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn worker_slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<WorkerProcess>>> {
        self.worker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its worker, if one was started (it may have exited since).
    pub(super) fn worker(&self) -> Option<Arc<WorkerProcess>> {
        self.worker_slot().clone()
    }

    /// The pid of its worker while one runs.
    pub(super) fn live_pid(&self) -> Option<u32> {
        self.worker().and_then(|worker| worker.pid())
    }

    /// Kills its worker at once (whoever holds `starting`) and waits until
    /// it has exited.
    pub(super) async fn kill(&self) {
        if let Some(worker) = self.worker() {
            self.kill_worker(&worker).await;
        }
    }

    /// Kills `worker` and waits until it has exited; a successor started
    /// meanwhile is left alone.
    pub(super) async fn kill_worker(&self, worker: &Arc<WorkerProcess>) {
        worker.kill().await;
        let mut slot = self.worker_slot();
        if slot.as_ref().is_some_and(|now| Arc::ptr_eq(now, worker)) {
            *slot = None;
        }
    }
}

/// Logs the stderr of worker `name`, counting the V8 heap exhaustions it
/// reports in `heap_exhaustions` (a memory limit broken inside the worker
/// rather than by the kernel).
pub(super) fn forward_stderr(
    name: &str,
    heap_exhaustions: Arc<AtomicU64>,
    stderr: Option<tokio::process::ChildStderr>,
) {
    let Some(stderr) = stderr else { return };
    let name = name.to_owned();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if HEAP_EXHAUSTED.iter().any(|said| line.contains(said)) {
                heap_exhaustions.fetch_add(1, Ordering::SeqCst);
            }
            tracing::debug!(runner = %name, "worker stderr: {line}");
        }
    });
}

/// What V8 prints when it cannot grow its heap.
const HEAP_EXHAUSTED: [&str; 2] = [
    "JavaScript heap out of memory",
    "Fatal process out of memory",
];
