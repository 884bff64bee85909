//! The warm pool: workers started ahead of demand, so the first call of a
//! tool does not wait for one to boot.
//!
//! A warm worker is isolated like any runner's (its own directory under
//! `<root>/.warm/`, user, cgroup, namespaces) but belongs to no account:
//! it has run no code but the worker's and the server's warm-up bundle
//! (`warmup.rs`, sent before it joins the pool, so a tenant's first call
//! finds it compiled), and has no egress socket, so no way out at all. A runner that would start its first worker here (its
//! directory does not exist yet) claims one instead (`claim.rs`); a claimed
//! worker is its runner's for good and never returns. Each claim is
//! replaced in the background; a warm worker that dies is discarded and
//! replaced.
//!
//! Warm workers count against the server-wide runner cap from the moment
//! their start is decided ([`WarmRoom`]): a refill waits for room, and a
//! call that finds the cap reached sheds a warm worker before any
//! account's idle runner is stopped for it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use super::process::{ExitNotice, Owner, WorkerProcess};
use super::spawn::{Placement, Spawned};
use super::warmup::warm_up;
use super::{LocalExecutor, BACKEND};
use crate::limits::RunnerCgroup;
use crate::metrics;
use crate::{SandboxError, WarmRoom, WarmRoomSlot};

/// Where warm workers' directories live, under the runner root.
pub(super) const WARM_DIR: &str = ".warm";

/// How long refills rest after a warm worker failed to start.
const REFILL_REST: Duration = Duration::from_secs(1);

/// The pool's books.
#[derive(Default)]
pub(super) struct WarmPool {
    state: Mutex<PoolState>,
    /// Who gives warm workers room, when a budget does.
    room: WarmRoomSlot,
}

/// Numbers warm workers' names, across every executor of this process
/// (they share the process's cgroups, named after the workers).
static NEXT_WARM: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct PoolState {
    /// How many warm workers the pool keeps (0: none).
    size: usize,
    /// Started and listening, oldest first.
    ready: VecDeque<Warm>,
    /// Being started.
    booting: usize,
    /// Workers being started that are to be discarded once up (shed).
    surplus: usize,
    /// Sheds waiting for a surplus worker to be discarded.
    shed_waiters: VecDeque<oneshot::Sender<()>>,
    /// A start failed: refills rest for a while.
    resting: bool,
}

/// A warm worker: started, listening, bound to no runner.
pub(super) struct Warm {
    /// Where it runs.
    pub(super) place: WarmPlace,
    /// The process.
    pub(super) worker: Arc<WorkerProcess>,
}

/// Where a warm worker runs, and as whom.
pub(super) struct WarmPlace {
    /// Its own name (`warm-<server pid>-<n>`), which holds its user id.
    pub(super) name: String,
    /// Its directory, where it was started.
    pub(super) dir: PathBuf,
    /// Its own (uid, gid), when it runs as one.
    pub(super) ids: Option<(u32, u32)>,
    /// Its cgroup, of no account.
    pub(super) cgroup: Option<Arc<RunnerCgroup>>,
    /// The V8 heap exhaustions its stderr reported.
    pub(super) heap: Arc<AtomicU64>,
}

impl WarmPool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The oldest ready warm worker, out of the pool.
    fn take_ready(&self) -> Option<Warm> {
        let mut state = self.state();
        let popped = state.ready.pop_front();
        metrics::warm_ready(BACKEND, state.ready.len());
        popped
    }

    /// A starting worker a shed waited for was discarded (or failed to
    /// start): the shed is done, if one still waits.
    fn surplus_gone(&self) {
        let waiter = {
            let mut state = self.state();
            if state.surplus == 0 {
                return;
            }
            state.surplus -= 1;
            state.shed_waiters.pop_front()
        };
        if let Some(done) = waiter {
            let _ = done.send(());
        }
    }
}

impl LocalExecutor {
    /// Keeps `size` warm workers from now on (0: none, as without a pool),
    /// after removing those a former server of this runner root left.
    /// Under a runner budget, call it once the budget holds this executor
    /// ([`crate::Executor::govern_warm`]), so warm workers count against
    /// its cap.
    pub fn start_warm_pool(&self, size: usize) -> Result<(), SandboxError> {
        let dir = self.inner.settings.root.join(WARM_DIR);
        std::fs::create_dir_all(&dir)?;
        // Warm workers' users pass through it to their own directory.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
        self.sweep_warm(&dir);
        self.inner.pool.state().size = size;
        tracing::info!(size, "warm runner pool started");
        self.refill();
        Ok(())
    }

    /// The pids of the warm workers ready to be claimed (under bubblewrap,
    /// of the `bwrap` processes they run in).
    pub fn warm_pids(&self) -> Vec<u32> {
        self.inner
            .pool
            .state()
            .ready
            .iter()
            .filter_map(|warm| warm.worker.pid())
            .collect()
    }

    /// Lets `room` account for warm workers from now on.
    pub(super) fn govern_pool(&self, room: Arc<dyn WarmRoom>) {
        self.inner.pool.room.govern(room);
    }

    /// Takes the oldest ready warm worker out of the pool for good and
    /// starts its replacement; warm workers found dead are discarded.
    pub(super) fn take_warm(&self) -> Option<Warm> {
        let pool = &self.inner.pool;
        let taken = loop {
            let popped = pool.take_ready();
            let Some(warm) = popped else { break None };
            pool.room.give_back();
            if !warm.worker.exited() {
                break Some(warm);
            }
            self.scrap_warm(&warm.place);
        };
        self.refill();
        taken
    }

    /// Discards one warm worker to make room for an account's runner (a
    /// starting one once it is up), its room given back before this
    /// returns; `false` when there is none to discard.
    pub(super) async fn shed_warm(&self) -> bool {
        let pool = &self.inner.pool;
        let waited = {
            let mut state = pool.state();
            let popped = state.ready.pop_front();
            metrics::warm_ready(BACKEND, state.ready.len());
            match popped {
                Some(warm) => Ok(warm),
                None if state.booting > state.surplus => {
                    state.surplus += 1;
                    let (done, discarded) = oneshot::channel();
                    state.shed_waiters.push_back(done);
                    Err(discarded)
                }
                None => return false,
            }
        };
        let warm = match waited {
            Ok(warm) => warm,
            Err(discarded) => {
                let _ = discarded.await;
                return true;
            }
        };
        warm.worker.kill().await;
        self.scrap_warm(&warm.place);
        pool.room.give_back();
        tracing::info!(worker = %warm.place.name, "warm worker discarded to make room for a runner");
        true
    }

    /// Starts warm workers until the pool holds its size, while there is
    /// room for them.
    fn refill(&self) {
        let pool = &self.inner.pool;
        loop {
            {
                let mut state = pool.state();
                let held = (state.ready.len() + state.booting).saturating_sub(state.surplus);
                if state.resting || held >= state.size || !pool.room.take() {
                    return;
                }
                state.booting += 1;
            }
            let executor = self.clone();
            tokio::spawn(async move { executor.boot_into_pool().await });
        }
    }

    /// Starts one warm worker into the pool (its room already taken).
    async fn boot_into_pool(self) {
        let booted = self.boot_warm().await;
        let pool = &self.inner.pool;
        let warm = match booted {
            Ok(warm) => warm,
            Err(err) => {
                {
                    let mut state = pool.state();
                    state.booting -= 1;
                    state.resting = true;
                }
                pool.room.give_back();
                // A shed that waited for this one is served by its failure.
                pool.surplus_gone();
                tracing::warn!(error = %err, "a warm worker failed to start; refilling the pool later");
                tokio::time::sleep(REFILL_REST).await;
                pool.state().resting = false;
                self.refill();
                return;
            }
        };
        let (name, worker) = (warm.place.name.clone(), warm.worker.clone());
        let surplus = {
            let mut state = pool.state();
            state.booting -= 1;
            if state.surplus > 0 {
                Some(warm)
            } else {
                state.ready.push_back(warm);
                metrics::warm_ready(BACKEND, state.ready.len());
                None
            }
        };
        match surplus {
            Some(warm) => {
                warm.worker.kill().await;
                self.scrap_warm(&warm.place);
                pool.room.give_back();
                pool.surplus_gone();
            }
            // Dead before it joined the pool: its exit found nothing to discard.
            None if worker.exited() => self.warm_lost(&name),
            None => {}
        }
    }

    /// Starts a warm worker in a directory, user and cgroup of its own,
    /// bound to no runner, and warms it up (`warmup.rs`).
    async fn boot_warm(&self) -> Result<Warm, SandboxError> {
        let number = NEXT_WARM.fetch_add(1, Ordering::Relaxed);
        let name = format!("warm-{}-{number}", std::process::id());
        let mut place = WarmPlace {
            dir: self.inner.settings.root.join(WARM_DIR).join(&name),
            name,
            ids: None,
            cgroup: None,
            heap: Arc::new(AtomicU64::new(0)),
        };
        let (child, lines) = match self.spawn_warm(&mut place).await {
            Ok(spawned) => spawned,
            Err(err) => {
                self.scrap_warm(&place);
                return Err(err);
            }
        };
        let weak = Arc::downgrade(&self.inner);
        let lost = place.name.clone();
        let notice = ExitNotice {
            runner: place.name.clone(),
            exits: self.inner.exits.clone(),
            bwrapped: self.inner.bwrap.is_some(),
            cgroup: place.cgroup.clone(),
            backend: BACKEND,
            owner: Owner::Pool(Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    LocalExecutor { inner }.warm_lost(&lost);
                }
            })),
        };
        let warm = Warm {
            worker: WorkerProcess::watch(child, lines, notice),
            place,
        };
        if let Err(err) = warm_up(&warm.place.dir).await {
            warm.worker.kill().await;
            self.scrap_warm(&warm.place);
            return Err(err);
        }
        Ok(warm)
    }

    /// Makes `place`'s directory and cgroup (noted in it) and spawns its
    /// worker.
    async fn spawn_warm(&self, place: &mut WarmPlace) -> Result<Spawned, SandboxError> {
        place.ids = self.make_dirs(&place.name, &place.dir)?;
        if self.inner.cgroups.any() {
            let made = RunnerCgroup::create_warm(
                &self.inner.cgroups,
                &place.name,
                &self.inner.settings.limits,
            )
            .map_err(|err| SandboxError::Start(format!("making a warm worker's cgroup: {err}")))?;
            place.cgroup = Some(Arc::new(made));
        }
        let placement = Placement {
            dir: &place.dir,
            ids: place.ids,
            cgroup: place.cgroup.as_deref(),
        };
        self.spawn_worker(&placement, &place.name, place.heap.clone())
            .await
    }

    /// A warm worker exited unclaimed: it is discarded and replaced.
    fn warm_lost(&self, name: &str) {
        let pool = &self.inner.pool;
        let found = {
            let mut state = pool.state();
            let at = state.ready.iter().position(|warm| warm.place.name == name);
            let found = at.and_then(|at| state.ready.remove(at));
            metrics::warm_ready(BACKEND, state.ready.len());
            found
        };
        let Some(warm) = found else { return };
        self.scrap_warm(&warm.place);
        pool.room.give_back();
        self.refill();
    }

    /// Removes what an exited (or never started) warm worker held: its
    /// directory, cgroup and user id.
    pub(super) fn scrap_warm(&self, warm: &WarmPlace) {
        if let Err(err) = std::fs::remove_dir_all(&warm.dir) {
            if err.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(worker = %warm.name, %err, "could not remove a warm worker's directory");
            }
        }
        if warm.cgroup.is_some() {
            self.inner.cgroups.remove_warm(&warm.name);
        }
        if let (Some(identities), Some((uid, _))) = (&self.inner.identities, warm.ids) {
            identities.release(uid, &warm.name);
        }
    }

    /// Removes the warm workers' directories (and frees their user ids)
    /// of servers that are gone.
    fn sweep_warm(&self, dir: &std::path::Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let gone = name
                .strip_prefix("warm-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| {
                    pid != std::process::id()
                        && !std::path::Path::new("/proc").join(pid.to_string()).exists()
                });
            if !gone {
                continue;
            }
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::symlink_metadata(entry.path()).map(|meta| meta.uid());
            let scrapped = match std::fs::symlink_metadata(entry.path()) {
                Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(entry.path()),
                _ => std::fs::remove_file(entry.path()),
            };
            if scrapped.is_ok() {
                if let (Some(identities), Ok(uid)) = (&self.inner.identities, owner) {
                    identities.release(uid, &name);
                }
            }
        }
    }
}
