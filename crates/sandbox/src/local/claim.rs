//! A runner's first start served by a warm worker of the pool (`pool.rs`),
//! bound to the runner for good: its directory renamed to the runner's
//! (under bubblewrap the worker sees it where it was started, since its
//! bind mount follows the directory; plain processes get a link at the old
//! path), its user id handed to the runner's name, its processes moved
//! into the runner's cgroups, its exit told as the runner's, and only then
//! its egress socket served, in the runner's scope. Whatever fails on the
//! way kills the worker, and the runner starts cold.
//!
//! Moving a process between cgroups waits for an RCU grace period (many
//! milliseconds), so where the kernel allows it (cgroup v1) the warm
//! worker's memory and process groups are renamed to the runner's instead,
//! limits and charges included, and its processes join the account's CPU
//! groups right after the claim, while its first call already runs: until
//! they have, that call's CPU time counts as the pool's, not the
//! account's. A worker whose processes cannot all be moved is killed.

use std::sync::{Arc, PoisonError};

use rustix::fs::{renameat_with, RenameFlags, CWD};

use super::pool::{Warm, WarmPlace};
use super::process::WorkerProcess;
use super::runner::Runner;
use super::{LocalExecutor, BACKEND};
use crate::limits::RunnerCgroup;
use crate::metrics;

impl LocalExecutor {
    /// A warm worker bound to `runner` for good, when the pool has one and
    /// the runner never ran here (it has no directory: a runner with one
    /// keeps its user and cache, and starts cold).
    pub(super) async fn claim_warm(&self, runner: &Runner) -> Option<Arc<WorkerProcess>> {
        if std::fs::symlink_metadata(&runner.dir).is_ok() {
            return None;
        }
        let warm = self.take_warm()?;
        if let Err(err) = renameat_with(
            CWD,
            &warm.place.dir,
            CWD,
            &runner.dir,
            RenameFlags::NOREPLACE,
        ) {
            tracing::warn!(runner = %runner.name, %err, "could not give a warm worker's directory to its runner");
            warm.worker.kill().await;
            self.scrap_warm(&warm.place);
            return None;
        }
        match self.bind_warm(runner, &warm) {
            Ok(cpu_pending) => {
                tracing::info!(runner = %runner.name, worker = %warm.place.name, "runner claimed a warm worker");
                metrics::warm_claimed(BACKEND);
                if let Some(group) = cpu_pending {
                    self.join_cpu_later(runner, &warm, group);
                }
                Some(warm.worker)
            }
            Err(reason) => {
                tracing::warn!(runner = %runner.name, %reason, "could not bind a warm worker to its runner; starting one");
                if matches!(reason, Unbound::Bound(_)) {
                    // Its exit is now told as a live runner's.
                    metrics::runner_live(BACKEND);
                }
                warm.worker.kill().await;
                if warm.place.cgroup.is_some() {
                    self.inner.cgroups.remove_warm(&warm.place.name);
                }
                None
            }
        }
    }

    /// Hands `warm`, its directory already the runner's, to `runner`; the
    /// runner's cgroup when the worker's processes are still to join its
    /// account's CPU groups.
    fn bind_warm(
        &self,
        runner: &Runner,
        warm: &Warm,
    ) -> Result<Option<Arc<RunnerCgroup>>, Unbound> {
        let place = &warm.place;
        if self.inner.bwrap.is_none() {
            // Its environment still names the old path.
            std::os::unix::fs::symlink(&runner.dir, &place.dir)
                .map_err(|err| Unbound::Moving(format!("linking its old path: {err}")))?;
        }
        if let (Some(identities), Some((uid, _))) = (&self.inner.identities, place.ids) {
            match identities.transfer(uid, &place.name, &runner.name) {
                Ok(true) => {}
                Ok(false) => return Err(Unbound::Moving("its user id was not its own".into())),
                Err(err) => return Err(Unbound::Moving(format!("its user id: {err}"))),
            }
        }
        *runner.ids.lock().unwrap_or_else(PoisonError::into_inner) = place.ids;
        let (cgroup, cpu_pending) = match &place.cgroup {
            Some(warm_group) => self.take_cgroup(runner, place, warm_group)?,
            None => (None, false),
        };
        let owner = (runner.key.clone(), self.inner.stops.clone());
        if !warm.worker.bind(&runner.name, cgroup.clone(), owner) {
            return Err(Unbound::Exited);
        }
        if place.cgroup.is_some() && !cpu_pending {
            self.inner.cgroups.remove_warm(&place.name);
        }
        *runner
            .heap_exhaustions
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = place.heap.clone();
        self.serve_egress(runner)
            .map_err(|err| Unbound::Bound(err.to_string()))?;
        Ok(cgroup.filter(|_| cpu_pending))
    }

    /// The runner's cgroup, made from the warm worker's at `place`: renamed
    /// where the kernel allows it (then its processes are still to join
    /// their account's CPU groups: `true`), else made and the processes
    /// moved in.
    fn take_cgroup(
        &self,
        runner: &Runner,
        place: &WarmPlace,
        warm_group: &RunnerCgroup,
    ) -> Result<(Option<Arc<RunnerCgroup>>, bool), Unbound> {
        let cgroups = &self.inner.cgroups;
        if !cgroups.renames_warm() {
            let group = self
                .cgroup(runner)
                .map_err(|err| Unbound::Moving(err.to_string()))?;
            if let Some(group) = &group {
                group
                    .adopt(warm_group)
                    .map_err(|err| Unbound::Moving(format!("its cgroup: {err}")))?;
            }
            return Ok((group, false));
        }
        let taken = RunnerCgroup::take_warm(
            cgroups,
            runner.key.account().as_str(),
            &runner.name,
            &place.name,
            &self.inner.settings.limits,
        )
        .map_err(|err| Unbound::Moving(format!("its cgroup: {err}")))?;
        let taken = Arc::new(taken);
        *runner.cgroup.lock().unwrap_or_else(PoisonError::into_inner) = Some(taken.clone());
        Ok((Some(taken), true))
    }

    /// Moves the claimed `warm` worker's processes into `group`'s CPU
    /// groups in the background, then removes its own; kills the worker
    /// when they cannot all be moved.
    fn join_cpu_later(&self, runner: &Runner, warm: &Warm, group: Arc<RunnerCgroup>) {
        let executor = self.clone();
        let (runner_name, warm_name) = (runner.name.clone(), warm.place.name.clone());
        let worker = warm.worker.clone();
        tokio::spawn(async move {
            let joined = tokio::task::spawn_blocking(move || group.join_cpu_groups()).await;
            let failed = match joined {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err.to_string()),
                Err(err) => Some(err.to_string()),
            };
            if let Some(err) = failed {
                tracing::warn!(runner = %runner_name, %err, "a claimed warm worker's processes could not join their account's CPU groups; killing it");
                worker.kill().await;
            }
            executor.inner.cgroups.remove_warm(&warm_name);
        });
    }
}

/// Why a warm worker could not be bound to its runner.
#[derive(Debug)]
enum Unbound {
    /// Moving it to the runner failed, before it was bound.
    Moving(String),
    /// It exited before it was bound.
    Exited,
    /// It was bound, but its egress could not be served.
    Bound(String),
}

impl std::fmt::Display for Unbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Moving(err) => write!(f, "moving it to the runner failed: {err}"),
            Self::Exited => f.write_str("it exited"),
            Self::Bound(err) => write!(f, "serving its egress failed: {err}"),
        }
    }
}
