//! The local-process backend: one Node worker child process per reservation
//! key, under `<root>/<runner name>/` (private home, cache, tmp and working
//! directory, plus the socket).
//!
//! Sequence of a call: `ensure` (start the worker if it is not running, then
//! health-check it) → `POST /invoke` on its socket → the shared relay
//! (`relay.rs`: one-shot fallback, kill on a missed deadline). Workers idle
//! longer than `idle_timeout` are stopped, unless the worker itself still
//! runs calls (detached ones outlive the request that launched them); their
//! on-disk cache stays.
//!
//! A worker never outlives the server: its stdin is a pipe the server holds
//! (`--lifeline-stdin`), and under bubblewrap `--die-with-parent` kills it too.
//!
//! Isolation: the worker gets an empty environment except `PATH`, `HOME`,
//! `TMPDIR`, `NODE_ENV` and its cache root; runs as `nobody` when the server
//! is root; and, under bubblewrap, sees a read-only system, a private `/tmp`,
//! its own directory, and none of the `hidden` paths (the server's data).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::relay::{forward_frames, spawn_relay, RunnerControl};
use crate::{
    Executor, Frame, FrameStream, InvokeRequest, ReservationKey, RunnerInfo, SandboxError,
    WorkerAssets, WorkerClient,
};

/// How much the local backend isolates a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationMode {
    /// Use bubblewrap when it works on this machine, else plain processes.
    Auto,
    /// Require bubblewrap; refuse to start workers without it.
    Bwrap,
    /// Plain child processes (environment and user isolation only).
    None,
}

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
    /// Paths a bubblewrapped worker must not see (the server's data directory).
    pub hidden: Vec<PathBuf>,
}

/// Runs workers as local child processes.
#[derive(Clone)]
pub struct LocalExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    settings: LocalSettings,
    assets: WorkerAssets,
    bwrap: Option<PathBuf>,
    run_as: Option<(u32, u32)>,
    runners: Mutex<HashMap<String, Arc<Runner>>>,
}

struct Runner {
    name: String,
    dir: PathBuf,
    process: tokio::sync::Mutex<Option<Child>>,
    last_used: Mutex<Instant>,
    inflight: AtomicUsize,
}

impl Runner {
    fn socket(&self) -> PathBuf {
        self.dir.join("worker.sock")
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

    async fn kill(&self) {
        if let Some(mut child) = self.process.lock().await.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

impl LocalExecutor {
    /// Prepares the backend: installs the worker sources and probes isolation.
    pub fn new(mut settings: LocalSettings) -> Result<Self, SandboxError> {
        // Workers run in their own directory, so every path handed to them is absolute.
        settings.root = std::path::absolute(&settings.root)?;
        std::fs::create_dir_all(&settings.root)?;
        let assets = WorkerAssets::install(&settings.root.join(".worker"))?;
        let run_as = running_as_root().then_some((NOBODY, NOBODY));
        if run_as.is_some() {
            // Workers run as `nobody`: they may pass through the root, not list it.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&settings.root, std::fs::Permissions::from_mode(0o711))?;
        }
        let bwrap = match settings.isolation {
            IsolationMode::None => None,
            IsolationMode::Auto => probe_bwrap(run_as),
            IsolationMode::Bwrap => Some(probe_bwrap(run_as).ok_or_else(|| {
                SandboxError::Start(
                    "bubblewrap isolation was required but bwrap does not work here".into(),
                )
            })?),
        };
        tracing::info!(
            root = %settings.root.display(),
            bubblewrap = bwrap.is_some(),
            run_as_nobody = run_as.is_some(),
            "local runner backend ready"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                assets,
                bwrap,
                run_as,
                runners: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Whether workers run under bubblewrap.
    pub fn uses_bwrap(&self) -> bool {
        self.inner.bwrap.is_some()
    }

    /// The socket of the runner for `key` (it may not be running).
    pub fn socket_path(&self, key: &ReservationKey) -> PathBuf {
        self.runner(key).socket()
    }

    /// The pid of the running worker for `key`, if any.
    pub async fn worker_pid(&self, key: &ReservationKey) -> Option<u32> {
        let runner = self.runner(key);
        let mut process = runner.process.lock().await;
        let child = process.as_mut()?;
        match child.try_wait() {
            Ok(None) => child.id(),
            _ => None,
        }
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
            let idle =
                || runner.inflight.load(Ordering::SeqCst) == 0 && runner.idle_for() >= timeout;
            if !idle() {
                continue;
            }
            // Held until the kill: a call that starts meanwhile waits for it
            // in `ensure_runner`, or had already raised the in-flight count.
            let mut process = runner.process.lock().await;
            if process.is_none() || !idle() {
                continue;
            }
            if worker_busy(&runner.socket()).await {
                tracing::debug!(runner = %runner.name, "idle runner still runs detached calls; kept");
                runner.touch();
                continue;
            }
            tracing::info!(runner = %runner.name, "stopping idle runner");
            if let Some(mut child) = process.take() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
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

    fn runner(&self, key: &ReservationKey) -> Arc<Runner> {
        let name = key.runner_name();
        let mut runners = match self.inner.runners.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        runners
            .entry(name.clone())
            .or_insert_with(|| {
                Arc::new(Runner {
                    dir: self.inner.settings.root.join(&name),
                    name,
                    process: tokio::sync::Mutex::new(None),
                    last_used: Mutex::new(Instant::now()),
                    inflight: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    /// Builds the command that runs `script` for `runner`, isolated.
    fn command(&self, runner: &Runner, script: &Path, args: &[&str]) -> Command {
        let settings = &self.inner.settings;
        let mut command = match &self.inner.bwrap {
            Some(bwrap) => {
                let mut cmd = Command::new(bwrap);
                cmd.args(BWRAP_SYSTEM_VIEW).args(["--tmpfs", "/tmp"]);
                for hidden in &settings.hidden {
                    if hidden.exists() {
                        cmd.arg("--tmpfs").arg(hidden);
                    }
                }
                cmd.arg("--ro-bind")
                    .arg(self.inner.assets.dir())
                    .arg(self.inner.assets.dir());
                cmd.arg("--bind").arg(&runner.dir).arg(&runner.dir);
                cmd.args([
                    "--unshare-pid",
                    "--unshare-ipc",
                    "--unshare-uts",
                    "--die-with-parent",
                    "--new-session",
                ]);
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
        if let Some((uid, gid)) = self.inner.run_as {
            command.uid(uid).gid(gid);
        }
        command
    }

    fn prepare_dirs(&self, runner: &Runner) -> Result<(), SandboxError> {
        for sub in ["home", "cache", "tmp", "work"] {
            let dir = runner.dir.join(sub);
            std::fs::create_dir_all(&dir)?;
            if let Some((uid, gid)) = self.inner.run_as {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
            }
        }
        if let Some((uid, gid)) = self.inner.run_as {
            std::os::unix::fs::chown(&runner.dir, Some(uid), Some(gid))?;
        }
        match std::fs::remove_file(runner.socket()) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
            _ => Ok(()),
        }
    }

    async fn start(&self, runner: &Runner) -> Result<Child, SandboxError> {
        self.prepare_dirs(runner)?;
        let socket = runner.socket();
        let socket_arg = socket.to_string_lossy().into_owned();
        let mut child = self
            .command(
                runner,
                &self.inner.assets.worker(),
                &["--socket", &socket_arg, "--lifeline-stdin"],
            )
            // The lifeline: the `Child` keeps the write end, and when this
            // process dies (even SIGKILLed) the worker reads its end and exits.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::Start(format!("spawning node: {e}")))?;
        forward_stderr(&runner.name, child.stderr.take());
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
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        tracing::info!(runner = %runner.name, pid = child.id(), "runner started");
        Ok(child)
    }

    async fn ensure_runner(&self, runner: &Runner) -> Result<bool, SandboxError> {
        let mut process = runner.process.lock().await;
        let alive = match process.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        };
        if alive && WorkerClient::new(runner.socket()).health().await.is_ok() {
            return Ok(false);
        }
        if let Some(mut dead) = process.take() {
            tracing::warn!(runner = %runner.name, "runner unhealthy; replacing it");
            let _ = dead.start_kill();
            let _ = dead.wait().await;
        }
        *process = Some(self.start(runner).await?);
        Ok(true)
    }
}

/// One local runner as the shared relay sees it.
struct LocalRunner {
    executor: LocalExecutor,
    runner: Arc<Runner>,
}

#[async_trait]
impl RunnerControl for LocalRunner {
    fn runner_name(&self) -> &str {
        &self.runner.name
    }

    async fn kill_worker(&self) {
        self.runner.kill().await;
    }

    async fn oneshot(
        &self,
        request: &InvokeRequest,
        tx: &mpsc::Sender<Frame>,
    ) -> Result<(), SandboxError> {
        let runner = &self.runner;
        self.executor.prepare_dirs(runner)?;
        let mut child = self
            .executor
            .command(runner, &self.executor.inner.assets.oneshot(), &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::Start(format!("spawning node: {e}")))?;
        forward_stderr(&runner.name, child.stderr.take());
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
        self.executor.ensure_runner(&self.runner).await?;
        WorkerClient::new(self.runner.socket())
            .invoke(request)
            .await
    }

    async fn call_finished(&self) {
        self.runner.inflight.fetch_sub(1, Ordering::SeqCst);
        self.runner.touch();
    }
}

#[async_trait]
impl Executor for LocalExecutor {
    async fn ensure(&self, key: &ReservationKey) -> Result<RunnerInfo, SandboxError> {
        let runner = self.runner(key);
        runner.touch();
        let started = self.ensure_runner(&runner).await?;
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
        if let Err(err) = self.ensure_runner(&runner).await {
            runner.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(err);
        }
        let worker = WorkerClient::new(runner.socket()).invoke(&request).await;
        let kill_grace = self.inner.settings.kill_grace;
        let control = LocalRunner {
            executor: self.clone(),
            runner,
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
}

/// What every bubblewrapped worker sees of the system: a read-only root,
/// a minimal `/dev` and its own `/proc`.
const BWRAP_SYSTEM_VIEW: [&str; 7] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"];

/// The `nobody` user and group on Debian-like systems.
const NOBODY: u32 = 65534;

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Finds `bwrap` on `PATH` and checks it can build a sandbox here as the worker's user.
fn probe_bwrap(run_as: Option<(u32, u32)>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let bwrap = std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|candidate| candidate.exists())?;
    let mut probe = std::process::Command::new(&bwrap);
    probe
        .args(BWRAP_SYSTEM_VIEW)
        .args(["--unshare-pid", "true"]);
    if let Some((uid, gid)) = run_as {
        use std::os::unix::process::CommandExt;
        probe.uid(uid).gid(gid);
    }
    let works = probe
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    works.then_some(bwrap)
}

/// How long the reaper waits for a worker's `/health`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the worker on `socket` reports calls in flight. A worker that
/// does not answer in time is not busy (it is hung or gone).
async fn worker_busy(socket: &Path) -> bool {
    let asked = tokio::time::timeout(HEALTH_TIMEOUT, WorkerClient::new(socket).inflight()).await;
    matches!(asked, Ok(Ok(count)) if count > 0)
}

fn forward_stderr(runner: &str, stderr: Option<tokio::process::ChildStderr>) {
    let Some(stderr) = stderr else { return };
    let runner = runner.to_owned();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(runner = %runner, "worker stderr: {line}");
        }
    });
}
