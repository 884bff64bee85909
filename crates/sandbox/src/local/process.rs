//! One started worker process of the local backend, watched by a task of
//! its own from its start to its exit. The task waits on the child, so the
//! server sees an exit the moment it happens (whoever caused it) and reaps
//! the process at once: no worker, and no `bwrap` around one, is left a
//! zombie. Kills go through the task too, so a signal never reaches a pid
//! the kernel has handed to another process.
//!
//! The detached calls the worker runs are recorded as their launches are
//! relayed ([`WorkerProcess::launched`]) and dropped as the worker reports
//! them done on its stdout (`{"done":"<callId>"}`, once each call's outcome
//! was delivered or given up). When the worker exits, its stdout is read to
//! its end, and the calls still recorded are announced in one
//! [`RunnerExit`], with how it ended. Before anyone can see the exit (and
//! so before a successor can start), the stop listeners hear of it
//! ([`crate::Executor::watch_stops`]).
//!
//! A warm worker of the pool (`pool.rs`) is watched the same way, bound to
//! no runner: its exit is told to the pool alone. Claimed, it is bound to
//! its runner for good ([`WorkerProcess::bind`]); from then on its exit is
//! told as that runner's.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{broadcast, watch, Notify};
use tokio::task::JoinHandle;

use crate::limits::RunnerCgroup;
use crate::{metrics, LaunchedCall, ReservationKey, RunnerExit, StopListener};

/// Everyone told of a worker's exit.
#[derive(Clone, Default)]
pub(super) struct StopListeners(Arc<Mutex<Vec<StopListener>>>);

impl StopListeners {
    /// Tells `listener` of every exit from now on.
    pub(super) fn add(&self, listener: StopListener) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(listener);
    }

    fn tell(&self, key: &ReservationKey) {
        let listeners = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for listener in listeners {
            listener(key);
        }
    }
}

/// Told when a warm worker of the pool exits unclaimed.
pub(super) type WarmLost = Box<dyn FnOnce() + Send>;

/// Whom a worker's exit concerns.
pub(super) enum Owner {
    /// A warm worker of the pool, claimed by no runner yet.
    Pool(WarmLost),
    /// The worker of one runner: its key, and who hears that it stopped.
    Runner(ReservationKey, StopListeners),
}

/// Where and how a worker's exit is told.
pub(super) struct ExitNotice {
    /// The runner's name (a warm worker's own name until it is claimed).
    pub(super) runner: String,
    /// Where exits are announced.
    pub(super) exits: broadcast::Sender<RunnerExit>,
    /// Whether the child is `bwrap` (which reports a signal that ended the
    /// worker as exit code 128 + the signal).
    pub(super) bwrapped: bool,
    /// The runner's cgroup, whose OOM kills tell a memory limit's kill.
    pub(super) cgroup: Option<Arc<RunnerCgroup>>,
    /// The metrics label of the backend.
    pub(super) backend: &'static str,
    /// Whom the exit concerns.
    pub(super) owner: Owner,
}

/// A worker's notice, with the cgroup's OOM kills when it was last bound;
/// `None` once the worker exited.
type Binding = Arc<Mutex<Option<(ExitNotice, Option<u64>)>>>;

/// The detached calls a worker runs; `None` once it exited.
type Running = Arc<Mutex<Option<HashMap<String, Value>>>>;

/// A started worker process.
pub(super) struct WorkerProcess {
    pid: Option<u32>,
    /// Asks the watching task to kill the worker.
    kill: Arc<Notify>,
    /// How the worker ended, once it has.
    exit: watch::Receiver<Option<Arc<str>>>,
    running: Running,
    /// How its exit is told, until it is.
    binding: Binding,
    /// The lifeline (`--lifeline-stdin`): the worker exits when it closes.
    _lifeline: Option<ChildStdin>,
}

impl WorkerProcess {
    /// Takes over `child`, a worker that reported ready (`stdout` holds the
    /// rest of its output), and watches it until it exits.
    pub(super) fn watch(
        mut child: Child,
        stdout: Lines<BufReader<ChildStdout>>,
        notice: ExitNotice,
    ) -> Arc<Self> {
        let lifeline = child.stdin.take();
        let running: Running = Arc::new(Mutex::new(Some(HashMap::new())));
        let kill = Arc::new(Notify::new());
        let (exited, exit) = watch::channel(None);
        let pid = child.id();
        let reports = tokio::spawn(read_reports(stdout, running.clone()));
        let oom_kills_before = notice.cgroup.as_ref().map(|group| group.oom_kills());
        let binding: Binding = Arc::new(Mutex::new(Some((notice, oom_kills_before))));
        let watched = Watched {
            kill: kill.clone(),
            exited,
            running: running.clone(),
            binding: binding.clone(),
        };
        tokio::spawn(watched.until_exit(child, reports));
        Arc::new(Self {
            pid,
            kill,
            exit,
            running,
            binding,
            _lifeline: lifeline,
        })
    }

    /// Binds a warm worker to the runner `name` of `key` for good: its exit
    /// is told as that runner's, its OOM kills read in `cgroup`. `false`
    /// when it already exited (its exit went to the pool).
    pub(super) fn bind(
        &self,
        name: &str,
        cgroup: Option<Arc<RunnerCgroup>>,
        owner: (ReservationKey, StopListeners),
    ) -> bool {
        let mut binding = self.binding.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((notice, oom_kills_before)) = binding.as_mut() else {
            return false;
        };
        *oom_kills_before = cgroup.as_ref().map(|group| group.oom_kills());
        notice.runner = name.to_owned();
        notice.cgroup = cgroup;
        notice.owner = Owner::Runner(owner.0, owner.1);
        true
    }

    /// The worker's pid while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.pid.filter(|_| !self.exited())
    }

    /// Whether the worker has exited (and been reaped).
    pub(super) fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// How the worker ended, once it has.
    pub(super) fn exit_cause(&self) -> Option<String> {
        self.exit.borrow().as_deref().map(str::to_owned)
    }

    /// Kills the worker (SIGKILL) and waits until it has exited.
    pub(super) async fn kill(&self) {
        self.kill.notify_one();
        let mut exit = self.exit.clone();
        let _ = exit.wait_for(Option::is_some).await;
    }

    /// Records the detached call `call_id` as running in the background on
    /// this worker; `Err` with how the worker ended when it already has
    /// (the call went with it).
    pub(super) fn launched(&self, call_id: &str, async_meta: &Value) -> Result<(), String> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        match running.as_mut() {
            Some(calls) => {
                calls.insert(call_id.to_owned(), async_meta.clone());
                Ok(())
            }
            None => Err(self.exit_cause().unwrap_or_default()),
        }
    }
}

/// What the watching task holds.
struct Watched {
    kill: Arc<Notify>,
    exited: watch::Sender<Option<Arc<str>>>,
    running: Running,
    binding: Binding,
}

impl Watched {
    /// Waits for the child's exit (killing it when asked), then tells it,
    /// once its `reports` are all read.
    async fn until_exit(self, mut child: Child, reports: JoinHandle<()>) {
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                () = self.kill.notified() => {
                    let _ = child.start_kill();
                }
            }
        };
        let bound = self
            .binding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((notice, oom_kills_before)) = bound else {
            return;
        };
        let oom_killed = match (&notice.cgroup, oom_kills_before) {
            (Some(group), Some(before)) => group.oom_kills() > before,
            _ => false,
        };
        let cause = match status {
            Ok(status) => describe(status, notice.bwrapped, oom_killed),
            Err(err) => format!("its exit could not be read: {err}"),
        };
        let (key, listeners) = match notice.owner {
            Owner::Runner(key, listeners) => (key, listeners),
            Owner::Pool(lost) => {
                self.exited.send_replace(Some(Arc::from(cause.as_str())));
                tracing::info!(worker = %notice.runner, %cause, "warm worker exited unclaimed");
                lost();
                return;
            }
        };
        listeners.tell(&key);
        self.exited.send_replace(Some(Arc::from(cause.as_str())));
        metrics::runner_gone(notice.backend);
        // Its last reports may still be unread; it wrote them before it ended.
        let _ = reports.await;
        let calls: Vec<LaunchedCall> = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(|(call_id, async_meta)| LaunchedCall {
                call_id,
                async_meta,
            })
            .collect();
        let runner = notice.runner;
        if calls.is_empty() {
            tracing::info!(%runner, %cause, "runner's worker exited");
            return;
        }
        tracing::warn!(%runner, %cause, calls = calls.len(), "runner's worker exited while it ran detached calls");
        let _ = notice.exits.send(RunnerExit {
            runner,
            cause,
            calls,
        });
    }
}

/// Reads the worker's reports on its stdout until it closes, dropping each
/// call it reports done.
async fn read_reports(mut stdout: Lines<BufReader<ChildStdout>>, running: Running) {
    while let Ok(Some(line)) = stdout.next_line().await {
        let Ok(report) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(done) = report.get("done").and_then(Value::as_str) {
            if let Some(calls) = running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_mut()
            {
                calls.remove(done);
            }
        }
    }
}

/// How a worker ended, in words: "killed by signal 9 (SIGKILL)", "exited
/// with code 3", or a memory limit's kill. `bwrap` reports a signal that
/// ended the worker as exit code 128 + the signal.
pub(super) fn describe(status: ExitStatus, bwrapped: bool, oom_killed: bool) -> String {
    let signal = status.signal().or_else(|| {
        status
            .code()
            .filter(|code| bwrapped && (129..=192).contains(code))
            .map(|code| code - 128)
    });
    match (signal, status.code()) {
        (Some(9), _) if oom_killed => {
            "killed by the kernel for using more than its memory limit (SIGKILL)".to_owned()
        }
        (Some(signal), _) => match signal_name(signal) {
            Some(name) => format!("killed by signal {signal} ({name})"),
            None => format!("killed by signal {signal}"),
        },
        (None, Some(code)) => format!("exited with code {code}"),
        (None, None) => format!("ended ({status})"),
    }
}

/// The name of a signal that commonly ends a process.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_told_in_words() {
        let raw = ExitStatus::from_raw;
        assert_eq!(
            describe(raw(9), false, false),
            "killed by signal 9 (SIGKILL)"
        );
        assert_eq!(describe(raw(3 << 8), false, false), "exited with code 3");
        assert_eq!(
            describe(raw(137 << 8), true, false),
            "killed by signal 9 (SIGKILL)",
            "bwrap's 128 + signal"
        );
        assert_eq!(
            describe(raw(137 << 8), false, false),
            "exited with code 137"
        );
        assert_eq!(
            describe(raw(134 << 8), true, false),
            "killed by signal 6 (SIGABRT)"
        );
        assert_eq!(describe(raw(31), false, false), "killed by signal 31");
        assert!(describe(raw(9), false, true).contains("memory limit"));
    }
}
