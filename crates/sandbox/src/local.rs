//! The local-process backend: one Node worker child process per reservation
//! key, under `<root>/<runner name>/` (private home, cache, tmp and working
//! directory, plus the socket).
//!
//! Sequence of a call: `ensure` (start the worker if it is not running) →
//! `POST /invoke` on its socket → the shared relay
//! (`relay.rs`: one-shot fallback, kill on a missed deadline). Workers idle
//! longer than `idle_timeout` are stopped, unless the worker itself still
//! runs calls (detached ones outlive the request that launched them); their
//! on-disk cache stays.
//!
//! A worker never outlives the server: its stdin is a pipe the server holds
//! (`--lifeline-stdin`), and under bubblewrap `--die-with-parent` kills it too.
//! The server, its parent, watches each worker until it exits (`process.rs`):
//! the exit is reaped at once and announced with the detached calls the
//! worker took with it ([`Executor::exits`]), so they settle at once rather
//! than when their pings are missed.
//!
//! Isolation: the worker gets an empty environment except `PATH`, `HOME`,
//! `TMPDIR`, `NODE_ENV` and its cache root, and, when the server is root,
//! runs as a user and group of its runner's own (`identity.rs`), which owns
//! the runner's directory. Under bubblewrap it also gets its own pid, IPC, UTS and
//! network namespaces and a minimal view of the host: `/usr` (and the
//! merged-`/usr` links), the CA certificates, the Node installation, the
//! worker sources, a private `/tmp` and its own directory. Its network
//! namespace holds only loopback; its one way out is the egress proxy
//! (`egress.rs`) on `egress.sock` in its directory. Whether bubblewrap is
//! used, required or switched off is settled at start (`isolation.rs`).
//!
//! A runner's first worker may come from the warm pool (`pool.rs`,
//! `claim.rs`): started ahead of demand, isolated the same way, and bound
//! to the runner for good when it is claimed.

mod backend;
mod claim;
mod host;
mod isolation;
mod pool;
mod process;
mod runner;
mod spawn;
mod warmup;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;
use tokio::sync::{broadcast, mpsc};

use crate::identity::RunnerIdentities;
use crate::limits::CgroupSupport;
use crate::meter::AccountMeter;
use crate::metrics;
use crate::relay::{forward_frames, RunnerControl};
use crate::seccomp::SeccompFilters;
use crate::{
    CallWatch, EgressProxy, EgressScope, EgressSettings, Frame, InvokeRequest, LaunchedCall, Limit,
    LimitBreach, PendingChecks, ReservationKey, RunnerExit, RunnerLimits, SandboxError,
    WorkerAssets, WorkerClient,
};
use host::{host_view, refuse_untraversable, running_as_root, NOBODY};
use isolation::Isolation;
pub use isolation::IsolationMode;
use pool::WarmPool;
use process::{StopListeners, WorkerProcess};
use runner::{forward_stderr, Runner};

/// Settings of the local backend; each is a server setting.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    /// The `node` executable.
    pub node_binary: PathBuf,
    /// Directory holding one subdirectory per runner.
    pub root: PathBuf,
    /// Stop a worker after this long without calls.
    pub idle_timeout: Duration,
    /// How long a starting worker may take to listen.
    pub start_timeout: Duration,
    /// Extra time past a call's deadline before a silent worker is killed.
    pub kill_grace: Duration,
    /// Isolation level.
    pub isolation: IsolationMode,
    /// The bubblewrap executable, looked up on `PATH` when it is a bare name.
    pub bwrap_binary: PathBuf,
    /// Where isolated workers' connections may go.
    pub egress: EgressSettings,
    /// What each runner may use.
    pub limits: RunnerLimits,
}

/// Runs workers as local child processes.
#[derive(Clone)]
pub struct LocalExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    settings: LocalSettings,
    assets: WorkerAssets,
    /// `bwrap` and the host view it builds, when workers are isolated.
    bwrap: Option<(PathBuf, Vec<String>)>,
    /// The seccomp filters bubblewrap loads, when workers are isolated.
    seccomp: Option<SeccompFilters>,
    egress: EgressProxy,
    /// Hands each runner a uid and gid of its own, when the server is root.
    identities: Option<RunnerIdentities>,
    /// The cgroup controllers runners get.
    cgroups: CgroupSupport,
    /// What an operator must know about how runners are held.
    warnings: Vec<String>,
    runners: Mutex<HashMap<String, Arc<Runner>>>,
    /// Where workers' exits are announced.
    exits: broadcast::Sender<RunnerExit>,
    /// Told of every worker's exit.
    stops: StopListeners,
    /// CPU microseconds of calls per account, where no cgroup counts them.
    call_cpu: AccountMeter,
    /// Workers started ahead of demand.
    pool: WarmPool,
}

/// Exits announced but not yet taken, per subscriber, before the oldest
/// are dropped (their calls then settle when their pings are missed).
const EXIT_BACKLOG: usize = 1024;

impl LocalExecutor {
    /// Prepares the backend: installs the worker sources and settles
    /// isolation. With [`IsolationMode::Bwrap`], a machine where bubblewrap
    /// cannot build a worker's sandbox is refused
    /// ([`SandboxError::Unisolated`]); workers left unisolated are logged
    /// at error level and listed by [`Executor::warnings`].
    pub fn new(mut settings: LocalSettings) -> Result<Self, SandboxError> {
        // Workers run in their own directory, so every path handed to them is absolute.
        settings.root = std::path::absolute(&settings.root)?;
        std::fs::create_dir_all(&settings.root)?;
        let assets = WorkerAssets::install(&settings.root.join(".worker"))?;
        let run_as = running_as_root().then_some((NOBODY, NOBODY));
        if let Some((uid, _)) = run_as {
            refuse_untraversable(&settings.root, uid)?;
            // Workers run as users of their own: they may pass through the root, not list it.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&settings.root, std::fs::Permissions::from_mode(0o711))?;
        }
        let view = host_view(&settings.node_binary, assets.dir());
        let Isolation { bwrap, warnings } =
            isolation::settle(settings.isolation, &settings.bwrap_binary, run_as, &view)?;
        for warning in &warnings {
            tracing::error!(isolation = ?settings.isolation, "{warning}");
        }
        tracing::info!(
            root = %settings.root.display(),
            bubblewrap = bwrap.is_some(),
            user_per_runner = run_as.is_some(),
            "local runner backend ready"
        );
        let cgroups = if run_as.is_some() {
            CgroupSupport::detect()
        } else {
            CgroupSupport::none("the server is not root: it cannot give runners cgroups")
        };
        let enforced_by = |held: bool| if held { "cgroup" } else { "rlimit" };
        tracing::info!(
            memory = enforced_by(cgroups.has_memory()),
            processes = enforced_by(cgroups.has_pids()),
            limits = ?settings.limits,
            "runner limits enforced"
        );
        for reason in cgroups.missing() {
            tracing::warn!(%reason, "a runner limit falls back to an rlimit");
        }
        if let Some(reason) = cgroups.cpu_missing() {
            tracing::warn!(%reason, "{}", UNFAIR_CPU);
        }
        cgroups.sweep();
        let egress = EgressProxy::new(settings.egress.clone());
        let seccomp = match bwrap {
            Some(_) => Some(SeccompFilters::install(&settings.root.join(".seccomp"))?),
            None => None,
        };
        let identities = match run_as {
            Some(_) => Some(RunnerIdentities::new(&settings.root)?),
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                assets,
                bwrap: bwrap.map(|bwrap| (bwrap, view)),
                seccomp,
                egress,
                identities,
                cgroups,
                warnings,
                runners: Mutex::new(HashMap::new()),
                exits: broadcast::channel(EXIT_BACKLOG).0,
                stops: StopListeners::default(),
                call_cpu: AccountMeter::default(),
                pool: WarmPool::default(),
            }),
        })
    }

    /// Whether every runner runs as a user and group of its own (the server
    /// is root).
    pub fn runs_as_own_users(&self) -> bool {
        self.inner.identities.is_some()
    }

    /// Whether workers run under bubblewrap.
    pub fn uses_bwrap(&self) -> bool {
        self.inner.bwrap.is_some()
    }

    /// Whether runners' memory and processes are held by cgroups (rather
    /// than rlimits).
    pub fn limits_by_cgroup(&self) -> bool {
        self.inner.cgroups.has_memory() && self.inner.cgroups.has_pids()
    }

    /// Whether every account's runners share one cgroup CPU weight, so that
    /// accounts get equal CPU under contention.
    pub fn cpu_shared_by_account(&self) -> bool {
        self.inner.cgroups.cpu_missing().is_none()
    }

    /// The socket of the runner for `key` (it may not be running).
    pub fn socket_path(&self, key: &ReservationKey) -> PathBuf {
        self.runner(key).socket()
    }

    /// The pid of the running worker for `key`, if any (under bubblewrap,
    /// of the `bwrap` process the worker runs in).
    pub async fn worker_pid(&self, key: &ReservationKey) -> Option<u32> {
        self.runner(key).live_pid()
    }

    /// Stops every worker idle for longer than the idle timeout. A worker
    /// whose `/health` still counts calls in flight (detached calls run on
    /// after their request ended) is kept and counts as used now.
    pub async fn reap_idle(&self) {
        let runners: Vec<Arc<Runner>> = match self.inner.runners.lock() {
            Ok(map) => map.values().cloned().collect(),
            Err(_) => return,
        };
        let timeout = self.inner.settings.idle_timeout;
        for runner in runners {
            if runner.idle_for() >= timeout && self.stop_when_idle(&runner, timeout).await {
                metrics::runners_evicted(BACKEND, 1);
            }
        }
    }

    /// Stops `runner`'s worker if it has no call in flight, has not been
    /// used for `unused` and its worker runs no detached call; `true` when
    /// a running worker was stopped. A worker still running calls counts
    /// as used now.
    async fn stop_when_idle(&self, runner: &Runner, unused: Duration) -> bool {
        let idle = || runner.inflight.load(Ordering::SeqCst) == 0 && runner.idle_for() >= unused;
        if !idle() {
            return false;
        }
        // Held until the kill: a call that starts meanwhile waits for it
        // in `ensure_runner`, or had already raised the in-flight count.
        let _starting = runner.starting.lock().await;
        let Some(worker) = runner.worker() else {
            return false;
        };
        if !idle() {
            return false;
        }
        if !worker.exited() && worker_busy(&runner.socket()).await {
            tracing::debug!(runner = %runner.name, "idle runner still runs detached calls; kept");
            runner.touch();
            return false;
        }
        let running = !worker.exited();
        if running {
            tracing::info!(runner = %runner.name, "stopping idle runner");
            worker.kill().await;
        }
        *runner.worker_slot() = None;
        self.inner
            .cgroups
            .remove(runner.key.account().as_str(), &runner.name);
        running
    }

    /// Runs [`LocalExecutor::reap_idle`] periodically until the executor is dropped.
    pub fn spawn_reaper(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        let every = (self.inner.settings.idle_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                LocalExecutor { inner }.reap_idle().await;
            }
        })
    }

    /// The runner for `key`, if this executor has made it.
    fn existing_runner(&self, key: &ReservationKey) -> Option<Arc<Runner>> {
        self.inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key.runner_name())
            .cloned()
    }

    fn runner(&self, key: &ReservationKey) -> Arc<Runner> {
        let name = key.runner_name();
        let mut runners = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        runners
            .entry(name.clone())
            .or_insert_with(|| {
                Arc::new(Runner {
                    key: key.clone(),
                    dir: self.inner.settings.root.join(&name),
                    egress: EgressScope::new(
                        &name,
                        key.account().as_str(),
                        &key.tool().to_string(),
                    ),
                    egress_listener: Mutex::new(None),
                    name,
                    starting: tokio::sync::Mutex::new(()),
                    worker: Mutex::new(None),
                    ids: Mutex::new(None),
                    last_used: Mutex::new(Instant::now()),
                    inflight: AtomicUsize::new(0),
                    cgroup: Mutex::new(None),
                    heap_exhaustions: Mutex::new(Arc::new(AtomicU64::new(0))),
                    pending_checks: Arc::new(PendingChecks::default()),
                })
            })
            .clone()
    }
}

/// One local runner as the shared relay sees it.
struct LocalRunner {
    executor: LocalExecutor,
    runner: Arc<Runner>,
    /// The worker the call was last sent to.
    served_by: Mutex<Arc<WorkerProcess>>,
    /// The call's watch over its limits, once started.
    watch: Mutex<Option<Arc<CallWatch>>>,
}

impl LocalRunner {
    fn served_by(&self) -> Arc<WorkerProcess> {
        self.served_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl RunnerControl for LocalRunner {
    fn runner_name(&self) -> &str {
        &self.runner.name
    }

    async fn kill_worker(&self) {
        self.runner.kill_worker(&self.served_by()).await;
    }

    async fn oneshot(
        &self,
        request: &InvokeRequest,
        tx: &mpsc::Sender<Frame>,
    ) -> Result<(), SandboxError> {
        let runner = &self.runner;
        self.executor.prepare_dirs(runner)?;
        self.executor.serve_egress(runner)?;
        let (mut command, _filters) =
            self.executor
                .runner_command(runner, &self.executor.inner.assets.oneshot(), &[])?;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::Start(format!("spawning node: {e}")))?;
        forward_stderr(&runner.name, runner.heap_counter(), child.stderr.take());
        let body =
            serde_json::to_vec(request).map_err(|e| SandboxError::Protocol(e.to_string()))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&body).await?;
        }
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| SandboxError::Start("no stdout".into()))?;
        let finished = forward_frames(stdout, tx).await?;
        let status = child.wait().await?;
        if finished {
            return Ok(());
        }
        Err(SandboxError::Protocol(format!(
            "one-shot runner exited ({status}) without a result"
        )))
    }

    async fn knows_call(&self, call_id: &str) -> bool {
        WorkerClient::new(self.runner.socket())
            .logs(call_id)
            .await
            .is_ok()
    }

    async fn relaunch(
        &self,
        request: &InvokeRequest,
    ) -> Result<mpsc::Receiver<Frame>, SandboxError> {
        let (worker, _) = self.executor.ensure_runner(&self.runner).await?;
        *self
            .served_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = worker;
        WorkerClient::new(self.runner.socket())
            .invoke(request)
            .await
    }

    async fn call_finished(&self) {
        self.runner.inflight.fetch_sub(1, Ordering::SeqCst);
        self.runner.touch();
        if self.executor.inner.cgroups.counts_cpu() {
            return;
        }
        let watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watch) = watch.as_ref() {
            let micros = watch.cpu_used().as_micros() as u64;
            self.executor
                .inner
                .call_cpu
                .of(self.runner.key.account().as_str())
                .fetch_add(micros, Ordering::Relaxed);
        }
    }

    fn watch_limits(&self) -> Option<Arc<CallWatch>> {
        let runner = &self.runner;
        let cgroup = runner
            .cgroup
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let pid = runner.live_pid();
        let watch = CallWatch::start(
            self.executor.inner.settings.limits.clone(),
            pid,
            runner.dir.clone(),
            cgroup,
            runner.heap_counter(),
            runner.pending_checks.clone(),
        );
        *self.watch.lock().unwrap_or_else(PoisonError::into_inner) = Some(watch.clone());
        Some(watch)
    }

    async fn limit_broken(&self, breach: &LimitBreach) {
        self.runner.kill_worker(&self.served_by()).await;
        if breach.limit == Limit::Disk {
            self.executor.wipe_dirs(&self.runner);
        }
    }

    async fn call_launched(&self, request: &InvokeRequest) {
        let meta = request.async_meta.clone().unwrap_or_default();
        let Err(cause) = self.served_by().launched(&request.call_id, &meta) else {
            return;
        };
        // Its worker exited before the launch was recorded: it went with it.
        let _ = self.executor.inner.exits.send(RunnerExit {
            runner: self.runner.name.clone(),
            cause,
            calls: vec![LaunchedCall {
                call_id: request.call_id.clone(),
                async_meta: meta,
            }],
        });
    }

    async fn exit_cause(&self) -> Option<String> {
        self.served_by().exit_cause()
    }
}

/// What it means that no cgroup shares CPU by account.
const UNFAIR_CPU: &str = "runners' CPU is not shared equally between accounts \
     (an account with more busy runners gets more CPU; the runner caps still hold)";

/// This backend's name in metrics.
const BACKEND: &str = "local";

/// How long past a call's deadline the worker may still fetch its bundle URL.
const BUNDLE_URL_SLACK: Duration = Duration::from_secs(60);

/// How long the reaper waits for a worker's `/health`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the worker on `socket` reports calls in flight. A worker that
/// does not answer in time is not busy (it is hung or gone).
async fn worker_busy(socket: &Path) -> bool {
    let asked = tokio::time::timeout(HEALTH_TIMEOUT, WorkerClient::new(socket).inflight()).await;
    matches!(asked, Ok(Ok(count)) if count > 0)
}
