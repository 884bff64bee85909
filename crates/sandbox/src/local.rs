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

mod isolation;
mod process;

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::{broadcast, mpsc};

use crate::identity::{give_tree, RunnerIdentities};
use crate::limits::{CgroupSupport, RunnerCgroup, SpawnLimits};
use crate::meter::AccountMeter;
use crate::metrics;
use crate::relay::{forward_frames, spawn_relay, RunnerControl};
use crate::seccomp::SeccompFilters;
use crate::{
    CallWatch, EgressProxy, EgressScope, EgressSettings, Executor, Frame, FrameStream,
    InvokeRequest, LaunchedCall, Limit, LimitBreach, PendingChecks, ReservationKey, RunnerExit,
    RunnerInfo, RunnerLimits, RunnerUsage, SandboxError, StopListener, WorkerAssets, WorkerClient,
};
pub use isolation::IsolationMode;
use isolation::{Isolation, BWRAP_NAMESPACES};
use process::{ExitNotice, StopListeners, WorkerProcess};
use toolserver_domain::AccountId;

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
}

/// Exits announced but not yet taken, per subscriber, before the oldest
/// are dropped (their calls then settle when their pings are missed).
const EXIT_BACKLOG: usize = 1024;

struct Runner {
    key: ReservationKey,
    name: String,
    dir: PathBuf,
    /// Whose traffic the runner's egress socket carries.
    egress: EgressScope,
    /// The egress socket's listener, once served.
    egress_listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Held while its worker is started, replaced or stopped for idling.
    starting: tokio::sync::Mutex<()>,
    /// Its worker, once started (it may have exited since). Read without
    /// `starting`, so [`Runner::kill`] never waits for a worker to start.
    worker: Mutex<Option<Arc<WorkerProcess>>>,
    last_used: Mutex<Instant>,
    inflight: AtomicUsize,
    /// The runner's cgroup, as its last worker started.
    cgroup: Mutex<Option<Arc<RunnerCgroup>>>,
    /// How often its workers reported V8 heap exhaustion.
    heap_exhaustions: Arc<AtomicU64>,
    /// Limit checks of its calls that already answered; a new call waits
    /// for them.
    pending_checks: Arc<PendingChecks>,
    /// The runner's own (uid, gid), once its directories were prepared.
    ids: Mutex<Option<(u32, u32)>>,
}

impl Runner {
    /// The runner's own (uid, gid), when it runs as one.
    fn ids(&self) -> Option<(u32, u32)> {
        self.ids.lock().ok().and_then(|ids| *ids)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("worker.sock")
    }

    fn egress_socket(&self) -> PathBuf {
        self.dir.join("egress.sock")
    }

    fn touch(&self) {
        if let Ok(mut at) = self.last_used.lock() {
            *at = Instant::now();
        }
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default()
    }

    fn worker_slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<WorkerProcess>>> {
        self.worker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its worker, if one was started (it may have exited since).
    fn worker(&self) -> Option<Arc<WorkerProcess>> {
        self.worker_slot().clone()
    }

    /// The pid of its worker while one runs.
    fn live_pid(&self) -> Option<u32> {
        self.worker().and_then(|worker| worker.pid())
    }

    /// Kills its worker at once (whoever holds `starting`) and waits until
    /// it has exited.
    async fn kill(&self) {
        if let Some(worker) = self.worker() {
            self.kill_worker(&worker).await;
        }
    }

    /// Kills `worker` and waits until it has exited; a successor started
    /// meanwhile is left alone.
    async fn kill_worker(&self, worker: &Arc<WorkerProcess>) {
        worker.kill().await;
        let mut slot = self.worker_slot();
        if slot.as_ref().is_some_and(|now| Arc::ptr_eq(now, worker)) {
            *slot = None;
        }
    }
}

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
                    heap_exhaustions: Arc::new(AtomicU64::new(0)),
                    pending_checks: Arc::new(PendingChecks::default()),
                })
            })
            .clone()
    }

    /// The runner's cgroup, made (again) for a worker about to start; `None`
    /// where runners get none.
    fn cgroup(&self, runner: &Runner) -> Result<Option<Arc<RunnerCgroup>>, SandboxError> {
        let cgroups = &self.inner.cgroups;
        if !cgroups.any() {
            return Ok(None);
        }
        let account = runner.key.account().as_str();
        let made =
            RunnerCgroup::create(cgroups, account, &runner.name, &self.inner.settings.limits)
                .map_err(|err| SandboxError::Start(format!("making the runner's cgroup: {err}")))?;
        let made = Arc::new(made);
        *runner.cgroup.lock().unwrap_or_else(PoisonError::into_inner) = Some(made.clone());
        Ok(Some(made))
    }

    /// Builds the command that runs `script` for `runner`, isolated and
    /// held to its limits, with the descriptors it inherits (the seccomp
    /// filters): keep them until it was spawned.
    fn command(
        &self,
        runner: &Runner,
        script: &Path,
        args: &[&str],
    ) -> Result<(Command, Vec<OwnedFd>), SandboxError> {
        let settings = &self.inner.settings;
        let filters = match &self.inner.seccomp {
            Some(seccomp) => seccomp.open()?,
            None => Vec::new(),
        };
        let mut command = match &self.inner.bwrap {
            Some((bwrap, view)) => {
                let mut cmd = Command::new(bwrap);
                cmd.args(view);
                for filter in &filters {
                    cmd.arg("--add-seccomp-fd")
                        .arg(filter.as_raw_fd().to_string());
                }
                cmd.arg("--bind").arg(&runner.dir).arg(&runner.dir);
                cmd.args(["--remount-ro", "/tmp"]);
                cmd.args(BWRAP_NAMESPACES);
                cmd.arg("--chdir").arg(runner.dir.join("work"));
                cmd.arg("--").arg(&settings.node_binary);
                cmd
            }
            None => Command::new(&settings.node_binary),
        };
        command.arg(script).args(args);
        command
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", runner.dir.join("home"))
            .env("TMPDIR", runner.dir.join("tmp"))
            .env("NODE_ENV", "production")
            .env("TOOLSERVER_CACHE_ROOTS", runner.dir.join("cache"))
            .current_dir(runner.dir.join("work"))
            .kill_on_drop(true);
        if self.inner.bwrap.is_some() {
            command.env("TOOLSERVER_EGRESS_SOCKET", runner.egress_socket());
        }
        let cgroup = self.cgroup(runner)?;
        SpawnLimits::new(
            &settings.limits,
            &self.inner.cgroups,
            cgroup.as_deref(),
            runner.ids(),
        )
        .inheriting(filters.iter().map(AsRawFd::as_raw_fd).collect())
        .apply(&mut command);
        Ok((command, filters))
    }

    /// Empties the runner's writable directories (after it broke its disk
    /// limit); they are made again when its next worker starts.
    fn wipe_dirs(&self, runner: &Runner) {
        for sub in WRITABLE_DIRS {
            if let Err(err) = std::fs::remove_dir_all(runner.dir.join(sub)) {
                tracing::warn!(runner = %runner.name, %err, "could not empty {sub}");
            }
        }
    }

    /// Makes the runner's directories, owned by its own ids (claimed on
    /// its first start; a directory of another owner, e.g. from a server
    /// that ran every runner as `nobody`, is handed over whole).
    fn prepare_dirs(&self, runner: &Runner) -> Result<(), SandboxError> {
        let ids = match &self.inner.identities {
            Some(identities) => Some(identities.of(&runner.name, &runner.dir)?),
            None => None,
        };
        for sub in WRITABLE_DIRS {
            let dir = runner.dir.join(sub);
            std::fs::create_dir_all(&dir)?;
            if let Some((uid, gid)) = ids {
                std::os::unix::fs::lchown(&dir, Some(uid), Some(gid))?;
            }
        }
        if let Some(ids) = ids {
            give_tree(&runner.dir, ids)?;
            // Its own user alone may enter it, even without bubblewrap.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&runner.dir, std::fs::Permissions::from_mode(0o700))?;
            if let Ok(mut current) = runner.ids.lock() {
                *current = Some(ids);
            }
        }
        match std::fs::remove_file(runner.socket()) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
            _ => Ok(()),
        }
    }

    /// Serves the runner's egress socket, once, when workers are isolated.
    fn serve_egress(&self, runner: &Runner) -> Result<(), SandboxError> {
        if self.inner.bwrap.is_none() {
            return Ok(());
        }
        let mut listener = runner
            .egress_listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if listener.as_ref().is_some_and(|task| !task.is_finished()) {
            return Ok(());
        }
        let task = self.inner.egress.serve(
            &runner.egress_socket(),
            runner.egress.clone(),
            runner.ids(),
        )?;
        *listener = Some(task);
        Ok(())
    }

    async fn start(&self, runner: &Runner) -> Result<Arc<WorkerProcess>, SandboxError> {
        self.prepare_dirs(runner)?;
        self.serve_egress(runner)?;
        let socket = runner.socket();
        let socket_arg = socket.to_string_lossy().into_owned();
        let (mut command, _filters) = self.command(
            runner,
            &self.inner.assets.worker(),
            &["--socket", &socket_arg, "--lifeline-stdin"],
        )?;
        let mut child = command
            // The lifeline: the `Child` keeps the write end, and when this
            // process dies (even SIGKILLed) the worker reads its end and exits.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::Start(format!("spawning node: {e}")))?;
        forward_stderr(runner, child.stderr.take());
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| SandboxError::Start("no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let ready =
            tokio::time::timeout(self.inner.settings.start_timeout, lines.next_line()).await;
        match ready {
            Ok(Ok(Some(line))) if line.contains("\"ready\":true") => {}
            other => {
                let _ = child.start_kill();
                return Err(SandboxError::Start(format!(
                    "worker did not report ready: {other:?}"
                )));
            }
        }
        tracing::info!(runner = %runner.name, pid = child.id(), "runner started");
        let notice = ExitNotice {
            runner: runner.name.clone(),
            exits: self.inner.exits.clone(),
            bwrapped: self.inner.bwrap.is_some(),
            cgroup: runner
                .cgroup
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            backend: BACKEND,
            stopped: (runner.key.clone(), self.inner.stops.clone()),
        };
        Ok(WorkerProcess::watch(child, lines, notice))
    }

    /// Makes sure `runner`'s worker runs, starting one if needed; the
    /// worker, and whether it was started now.
    ///
    /// A running worker is used without asking it first: its exit is seen
    /// at once (`process.rs`), and one that is alive but no longer accepts
    /// calls (its socket gone, its server closed) fails the call before
    /// accepting it, which the relay answers by replacing the worker and
    /// running that call one-shot.
    async fn ensure_runner(
        &self,
        runner: &Runner,
    ) -> Result<(Arc<WorkerProcess>, bool), SandboxError> {
        let _starting = runner.starting.lock().await;
        if let Some(worker) = runner.worker() {
            if !worker.exited() {
                return Ok((worker, false));
            }
            tracing::warn!(runner = %runner.name, cause = worker.exit_cause(), "runner exited; replacing it");
            worker.kill().await;
        }
        let starting = Instant::now();
        let worker = self.start(runner).await?;
        metrics::runner_started(BACKEND, starting.elapsed());
        metrics::runner_live(BACKEND);
        *runner.worker_slot() = Some(worker.clone());
        Ok((worker, true))
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
                .command(runner, &self.executor.inner.assets.oneshot(), &[])?;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::Start(format!("spawning node: {e}")))?;
        forward_stderr(runner, child.stderr.take());
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
            runner.heap_exhaustions.clone(),
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

#[async_trait]
impl Executor for LocalExecutor {
    async fn ensure(&self, key: &ReservationKey) -> Result<RunnerInfo, SandboxError> {
        let runner = self.runner(key);
        runner.touch();
        let (_, started) = self.ensure_runner(&runner).await?;
        Ok(RunnerInfo {
            name: runner.name.clone(),
            started,
        })
    }

    async fn invoke(
        &self,
        key: &ReservationKey,
        request: InvokeRequest,
    ) -> Result<FrameStream, SandboxError> {
        let runner = self.runner(key);
        runner.inflight.fetch_add(1, Ordering::SeqCst);
        runner.touch();
        runner.egress.restrict(request.egress_allow.clone());
        if let Some(url) = &request.bundle.url {
            let lifetime = Duration::from_millis(request.deadline_ms) + BUNDLE_URL_SLACK;
            runner.egress.admit(url, lifetime);
        }
        // A breach the last answered call left is dealt with first.
        runner.pending_checks.settled().await;
        let served_by = match self.ensure_runner(&runner).await {
            Ok((worker, _)) => worker,
            Err(err) => {
                runner.inflight.fetch_sub(1, Ordering::SeqCst);
                return Err(err);
            }
        };
        let client = WorkerClient::new(runner.socket());
        let sent = request.clone();
        let worker = async move { client.invoke(&sent).await };
        let kill_grace = self.inner.settings.kill_grace;
        let control = LocalRunner {
            executor: self.clone(),
            runner,
            served_by: Mutex::new(served_by),
            watch: Mutex::new(None),
        };
        Ok(spawn_relay(control, request, worker, kill_grace))
    }

    async fn cancel(&self, key: &ReservationKey, call_id: &str) -> Result<bool, SandboxError> {
        WorkerClient::new(self.runner(key).socket())
            .cancel(call_id)
            .await
    }

    async fn logs(&self, key: &ReservationKey, call_id: &str) -> Result<Value, SandboxError> {
        WorkerClient::new(self.runner(key).socket())
            .logs(call_id)
            .await
    }

    async fn stop(&self, key: &ReservationKey) -> Result<(), SandboxError> {
        self.runner(key).kill().await;
        Ok(())
    }

    fn exits(&self) -> broadcast::Receiver<RunnerExit> {
        self.inner.exits.subscribe()
    }

    async fn stop_if_idle(&self, key: &ReservationKey) -> Result<bool, SandboxError> {
        let Some(runner) = self.existing_runner(key) else {
            return Ok(true);
        };
        self.stop_when_idle(&runner, Duration::ZERO).await;
        Ok(runner.live_pid().is_none())
    }

    fn usage(&self, account: &AccountId) -> RunnerUsage {
        let live_runners = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|runner| runner.key.account() == account && runner.live_pid().is_some())
            .count();
        let cpu = self
            .inner
            .cgroups
            .cpu_used(account.as_str())
            .unwrap_or_else(|| Duration::from_micros(self.inner.call_cpu.read(account.as_str())));
        RunnerUsage {
            live_runners,
            cpu,
            egress_bytes: self.inner.egress.egress_bytes(account.as_str()),
        }
    }

    fn usage_all(&self) -> Vec<(AccountId, RunnerUsage)> {
        let mut accounts: Vec<AccountId> = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|runner| runner.key.account().clone())
            .collect();
        accounts.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        accounts.dedup();
        accounts
            .into_iter()
            .map(|account| {
                let usage = self.usage(&account);
                (account, usage)
            })
            .collect()
    }

    fn warnings(&self) -> Vec<String> {
        let unfair_cpu = self
            .inner
            .cgroups
            .cpu_missing()
            .map(|reason| format!("{UNFAIR_CPU}: {reason}"));
        self.inner
            .warnings
            .iter()
            .cloned()
            .chain(unfair_cpu)
            .collect()
    }

    fn watch_stops(&self, listener: StopListener) {
        self.inner.stops.add(listener);
    }
}

/// What it means that no cgroup shares CPU by account.
const UNFAIR_CPU: &str = "runners' CPU is not shared equally between accounts \
     (an account with more busy runners gets more CPU; the runner caps still hold)";

/// This backend's name in metrics.
const BACKEND: &str = "local";

/// The directories of a runner its worker may write.
const WRITABLE_DIRS: [&str; 4] = ["home", "cache", "tmp", "work"];

/// How long past a call's deadline the worker may still fetch its bundle URL.
const BUNDLE_URL_SLACK: Duration = Duration::from_secs(60);

/// What a bubblewrapped worker sees of the host: a private `/tmp` (first, as
/// the binds after it may lie under it); read-only, `/usr` with the
/// merged-`/usr` links, the CA certificates, the Node installation if it
/// lives elsewhere, the worker sources; a minimal `/dev` and its own `/proc`.
fn host_view(node_binary: &Path, assets: &Path) -> Vec<String> {
    let mut shown: Vec<PathBuf> = vec!["/usr".into()];
    shown.extend(node_prefix(node_binary).filter(|prefix| !prefix.starts_with("/usr")));
    shown.push(assets.to_path_buf());
    shown.extend(
        ["/etc/ssl", "/etc/ca-certificates"]
            .map(PathBuf::from)
            .into_iter()
            .filter(|etc| etc.is_dir()),
    );
    let mut view: Vec<String> = vec!["--tmpfs".to_owned(), "/tmp".to_owned()];
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        match std::fs::read_link(&host) {
            Ok(target) => view.extend([
                "--symlink".to_owned(),
                target.to_string_lossy().into_owned(),
                host.to_string_lossy().into_owned(),
            ]),
            Err(_) if host.is_dir() => shown.push(host),
            Err(_) => {}
        }
    }
    for path in shown {
        let path = path.to_string_lossy().into_owned();
        view.extend(["--ro-bind".to_owned(), path.clone(), path]);
    }
    view.extend(["--dev", "/dev", "--proc", "/proc"].map(str::to_owned));
    view
}

/// The installation prefix of the `node` binary (`<prefix>/bin/node`),
/// found on `PATH` when it is a bare name.
fn node_prefix(node_binary: &Path) -> Option<PathBuf> {
    let found = if node_binary.components().count() > 1 {
        node_binary.to_path_buf()
    } else {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(node_binary))
            .find(|candidate| candidate.is_file())?
    };
    let real = std::fs::canonicalize(found).ok()?;
    Some(real.parent()?.parent()?.to_path_buf())
}

/// The `nobody` user and group on Debian-like systems: bubblewrap is probed
/// as it, and a runner root must be traversable by it (by anyone).
const NOBODY: u32 = 65534;

/// Refuses a runner root the runner user `uid` could not reach: every
/// directory above it must let others pass (mode `o+x`).
fn refuse_untraversable(root: &Path, uid: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    for ancestor in root.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        if meta.mode() & 0o001 == 0 && meta.uid() != uid {
            return Err(SandboxError::Start(format!(
                "the runner directory {} lies under {} (mode {:o}), which the runner user (uid {uid}) cannot enter; \
                 make it traversable (chmod o+x {}) or choose a data directory outside it",
                root.display(),
                ancestor.display(),
                meta.mode() & 0o7777,
                ancestor.display(),
            )));
        }
    }
    Ok(())
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// How long the reaper waits for a worker's `/health`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the worker on `socket` reports calls in flight. A worker that
/// does not answer in time is not busy (it is hung or gone).
async fn worker_busy(socket: &Path) -> bool {
    let asked = tokio::time::timeout(HEALTH_TIMEOUT, WorkerClient::new(socket).inflight()).await;
    matches!(asked, Ok(Ok(count)) if count > 0)
}

/// Logs a worker's stderr, counting the V8 heap exhaustions it reports
/// (a memory limit broken inside the worker rather than by the kernel).
fn forward_stderr(runner: &Runner, stderr: Option<tokio::process::ChildStderr>) {
    let Some(stderr) = stderr else { return };
    let name = runner.name.clone();
    let heap_exhaustions = runner.heap_exhaustions.clone();
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
