//! Starting a runner's worker: its cgroup, directories, egress socket and
//! command line (bubblewrapped or not), then the process itself.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::isolation::BWRAP_NAMESPACES;
use super::process::{ExitNotice, Owner, WorkerProcess};
use super::runner::{forward_stderr, Runner, EGRESS_SOCKET, WORKER_SOCKET};
use super::{LocalExecutor, BACKEND};
use crate::identity::give_tree;
use crate::limits::{RunnerCgroup, SpawnLimits};
use crate::{metrics, SandboxError};

impl LocalExecutor {
    /// The runner's cgroup, made (again) for a worker about to start; `None`
    /// where runners get none.
    pub(super) fn cgroup(
        &self,
        runner: &Runner,
    ) -> Result<Option<Arc<RunnerCgroup>>, SandboxError> {
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

    /// Builds the command that runs `script` for `runner` in its cgroup
    /// (made again now), with the descriptors it inherits: keep them until
    /// it was spawned.
    pub(super) fn runner_command(
        &self,
        runner: &Runner,
        script: &Path,
        args: &[&str],
    ) -> Result<(Command, Vec<OwnedFd>), SandboxError> {
        let cgroup = self.cgroup(runner)?;
        let placement = Placement {
            dir: &runner.dir,
            ids: runner.ids(),
            cgroup: cgroup.as_deref(),
        };
        self.command(&placement, script, args)
    }

    /// Builds the command that runs `script` at `placement`, isolated and
    /// held to its limits, with the descriptors it inherits (the seccomp
    /// filters): keep them until it was spawned.
    pub(super) fn command(
        &self,
        placement: &Placement<'_>,
        script: &Path,
        args: &[&str],
    ) -> Result<(Command, Vec<OwnedFd>), SandboxError> {
        let settings = &self.inner.settings;
        let dir = placement.dir;
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
                cmd.arg("--bind").arg(dir).arg(dir);
                cmd.args(["--remount-ro", "/tmp"]);
                cmd.args(BWRAP_NAMESPACES);
                cmd.arg("--chdir").arg(dir.join("work"));
                cmd.arg("--").arg(&settings.node_binary);
                cmd
            }
            None => Command::new(&settings.node_binary),
        };
        command.arg(script).args(args);
        command
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", dir.join("home"))
            .env("TMPDIR", dir.join("tmp"))
            .env("NODE_ENV", "production")
            .env("TOOLSERVER_CACHE_ROOTS", dir.join("cache"))
            .current_dir(dir.join("work"))
            .kill_on_drop(true);
        if self.inner.bwrap.is_some() {
            command.env("TOOLSERVER_EGRESS_SOCKET", dir.join(EGRESS_SOCKET));
        }
        SpawnLimits::new(
            &settings.limits,
            &self.inner.cgroups,
            placement.cgroup,
            placement.ids,
        )
        .inheriting(filters.iter().map(AsRawFd::as_raw_fd).collect())
        .apply(&mut command);
        Ok((command, filters))
    }

    /// Empties the runner's writable directories (after it broke its disk
    /// limit); they are made again when its next worker starts.
    pub(super) fn wipe_dirs(&self, runner: &Runner) {
        for sub in WRITABLE_DIRS {
            if let Err(err) = std::fs::remove_dir_all(runner.dir.join(sub)) {
                tracing::warn!(runner = %runner.name, %err, "could not empty {sub}");
            }
        }
    }

    /// Makes the runner's directories, owned by its own ids (claimed on
    /// its first start; a directory of another owner, e.g. from a server
    /// that ran every runner as `nobody`, is handed over whole).
    pub(super) fn prepare_dirs(&self, runner: &Runner) -> Result<(), SandboxError> {
        let ids = self.make_dirs(&runner.name, &runner.dir)?;
        if let Some(ids) = ids {
            if let Ok(mut current) = runner.ids.lock() {
                *current = Some(ids);
            }
        }
        Ok(())
    }

    /// Makes the directories of the worker `name` under `dir`, owned by
    /// its own ids when it gets some (returned), with no stale socket.
    pub(super) fn make_dirs(
        &self,
        name: &str,
        dir: &Path,
    ) -> Result<Option<(u32, u32)>, SandboxError> {
        let ids = match &self.inner.identities {
            Some(identities) => Some(identities.of(name, dir)?),
            None => None,
        };
        for sub in WRITABLE_DIRS {
            let sub = dir.join(sub);
            std::fs::create_dir_all(&sub)?;
            if let Some((uid, gid)) = ids {
                std::os::unix::fs::lchown(&sub, Some(uid), Some(gid))?;
            }
        }
        if let Some(ids) = ids {
            give_tree(dir, ids)?;
            // Its own user alone may enter it, even without bubblewrap.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        match std::fs::remove_file(dir.join(WORKER_SOCKET)) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
            _ => Ok(ids),
        }
    }

    /// Serves the runner's egress socket, once, when workers are isolated.
    pub(super) fn serve_egress(&self, runner: &Runner) -> Result<(), SandboxError> {
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

    /// Starts `runner`'s worker, cold.
    pub(super) async fn start(&self, runner: &Runner) -> Result<Arc<WorkerProcess>, SandboxError> {
        self.prepare_dirs(runner)?;
        self.serve_egress(runner)?;
        let cgroup = self.cgroup(runner)?;
        let placement = Placement {
            dir: &runner.dir,
            ids: runner.ids(),
            cgroup: cgroup.as_deref(),
        };
        let (child, lines) = self
            .spawn_worker(&placement, &runner.name, runner.heap_counter())
            .await?;
        let notice = ExitNotice {
            runner: runner.name.clone(),
            exits: self.inner.exits.clone(),
            bwrapped: self.inner.bwrap.is_some(),
            cgroup,
            backend: BACKEND,
            owner: Owner::Runner(runner.key.clone(), self.inner.stops.clone()),
        };
        Ok(WorkerProcess::watch(child, lines, notice))
    }

    /// Spawns the worker `name` at `placement` and waits until it reports
    /// ready; its stderr is logged, counting heap exhaustions in `heap`.
    pub(super) async fn spawn_worker(
        &self,
        placement: &Placement<'_>,
        name: &str,
        heap: Arc<AtomicU64>,
    ) -> Result<Spawned, SandboxError> {
        let socket = placement.dir.join(WORKER_SOCKET);
        let socket_arg = socket.to_string_lossy().into_owned();
        let (mut command, _filters) = self.command(
            placement,
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
        forward_stderr(name, heap, child.stderr.take());
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
        tracing::info!(worker = %name, pid = child.id(), "worker started");
        Ok((child, lines))
    }

    /// Makes sure `runner`'s worker runs, starting one if needed; the
    /// worker, and whether it was started now.
    ///
    /// A running worker is used without asking it first: its exit is seen
    /// at once (`process.rs`), and one that is alive but no longer accepts
    /// calls (its socket gone, its server closed) fails the call before
    /// accepting it, which the relay answers by replacing the worker and
    /// running that call one-shot.
    pub(super) async fn ensure_runner(
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
        let worker = match self.claim_warm(runner).await {
            Some(worker) => worker,
            None => self.start(runner).await?,
        };
        metrics::runner_started(BACKEND, starting.elapsed());
        metrics::runner_live(BACKEND);
        *runner.worker_slot() = Some(worker.clone());
        Ok((worker, true))
    }
}

/// A worker that reported ready, and the rest of its output.
pub(super) type Spawned = (Child, Lines<BufReader<ChildStdout>>);

/// Where a worker runs and as whom.
pub(super) struct Placement<'a> {
    /// Its directory (bound at the same path under bubblewrap).
    pub(super) dir: &'a Path,
    /// Its own (uid, gid), when it gets some.
    pub(super) ids: Option<(u32, u32)>,
    /// Its cgroup, when it gets one.
    pub(super) cgroup: Option<&'a RunnerCgroup>,
}

/// The directories of a runner its worker may write.
const WRITABLE_DIRS: [&str; 4] = ["home", "cache", "tmp", "work"];
