//! The warm pool: runner pods started ahead of demand, so the first call
//! of a tool does not wait for a pod to be scheduled and its worker to
//! start.
//!
//! A warm pod is made like any runner pod (the same image, hardening,
//! resources, runtime class, NetworkPolicy label, egress proxy and a bearer
//! secret of its own) but belongs to no key: it is named
//! `tr-warm-<random>`, labelled `toolserver.dev/warm=true` and
//! `toolserver.dev/replica=<id>` (this server process's random id), and
//! carries no account or tool. Once ready, its worker is started, and it
//! waits.
//!
//! **Claim.** A key with no pod of its own claims one
//! ([`crate::pods::RunnerPods`]): the oldest ready warm pod of this pool is
//! merge-patched, on the condition that its resource version is the one
//! last seen ([`crate::manifests::claim_patch`]), with the key's labels and
//! annotations (what the NetworkPolicy, the idle reaper and the ownership
//! check read), `toolserver.dev/runner` naming the key's runner, and the
//! claim's time, the pool's marks removed. Of two claims of one pod exactly
//! one succeeds; a claim that finds the pod changed reads it again and
//! retries while it is still a ready warm pod of this pool, else it takes
//! the next, and with none left the key's pod is created as without a
//! pool. Each server claims only its own pool's pods. A claimed pod is its
//! key's runner for good and never returns; its replacement starts at
//! once, in the background.
//!
//! **Cache.** A pod's volumes cannot change once it exists, so a warm pod's
//! module cache is an `emptyDir` of the cache's size, not a key's claim: a
//! runner started from a warm pod downloads its bundles once more, and its
//! modules are lost when it scales to zero. With persistent caches only a
//! key's first start takes a warm pod: the claim creates the key's cache
//! claim, so every later start of the key is a cold one on that claim and
//! keeps its modules (as a local runner with a directory starts cold).
//!
//! **Budget.** Warm pods count against the server-wide runner cap from the
//! moment their start is decided ([`WarmRoom`]); a refill waits for room;
//! a call that finds the cap reached sheds (deletes) one before any
//! account's idle runner is stopped for it; a claimed pod's room is given
//! back, since its runner counts from then on.
//!
//! **No leaks.** Every [`TICK`] the pool lists the namespace's warm pods:
//! it vouches for its own and those it is starting (a
//! `toolserver.dev/warm-heartbeat` annotation of now), replaces those that
//! died or were deleted, and deletes any other warm pod no server vouched
//! for within [`STALE`] (its server crashed, restarted under a new id, or
//! was scaled down), conditionally on the pod's resource version so a claim
//! that lands meanwhile wins. The first round runs when the pool starts.
//! When the pool is dropped it deletes its ready pods, when a runtime is
//! still there to do it.

mod pods;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Preconditions;
use rand::RngCore;
use time::OffsetDateTime;
use toolserver_sandbox::{metrics, ReservationKey, SandboxError, WarmRoom, WarmRoomSlot};

pub use pods::{abandoned, Claim, WarmPods};

use crate::manifests::WARM_NAME_PREFIX;
use crate::names::BACKEND;
use crate::pod_state::{state_of, PodState};
use pods::{is_warm_of, resource_version};

/// How often the pool tends its pods (vouches, replaces, sweeps).
pub const TICK: Duration = Duration::from_secs(15);

/// How long a warm pod no server vouched for lives on.
pub const STALE: Duration = Duration::from_secs(60);

/// How long refills rest after a warm pod failed to start.
const REFILL_REST: Duration = Duration::from_secs(5);

/// Claims of one warm pod tried before it is given up.
const CLAIM_ATTEMPTS: usize = 3;

/// Random bytes in a warm pod's name and in a server's id.
const RANDOM_BYTES: usize = 8;

/// The pool of one server process.
#[derive(Clone)]
pub(crate) struct WarmPool {
    shared: Arc<Shared>,
}

struct Shared {
    pods: WarmPods,
    /// This process's id among the servers of the namespace.
    replica: String,
    state: Mutex<PoolState>,
    /// Who gives warm pods room, when a budget does.
    room: WarmRoomSlot,
}

#[derive(Default)]
struct PoolState {
    /// How many warm pods the pool keeps (0: none, and no claims).
    size: usize,
    /// Whether the pool was started (it tends its pods).
    started: bool,
    /// Ready, their worker started, oldest first.
    ready: VecDeque<Ready>,
    /// Being started, by name.
    booting: Vec<String>,
    /// Pods being started that were shed: their room is given back already
    /// and they are deleted once up.
    shed: HashSet<String>,
    /// A start failed: refills rest for a while.
    resting: bool,
}

/// A ready warm pod.
struct Ready {
    name: String,
    /// Its resource version as last seen, the precondition of its claim.
    resource_version: String,
}

/// Random hex of [`RANDOM_BYTES`] bytes.
fn random_hex() -> String {
    let mut bytes = [0u8; RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl WarmPool {
    /// An empty pool (size 0) over `pods`, with a fresh server id.
    pub(crate) fn new(pods: WarmPods) -> Self {
        Self {
            shared: Arc::new(Shared {
                pods,
                replica: random_hex(),
                state: Mutex::new(PoolState::default()),
                room: WarmRoomSlot::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.shared.state()
    }

    /// Whether claims may take warm pods (the pool keeps some).
    pub(crate) fn enabled(&self) -> bool {
        self.state().size > 0
    }

    /// Lets `room` account for warm pods from now on.
    pub(crate) fn govern(&self, room: Arc<dyn WarmRoom>) {
        self.shared.room.govern(room);
    }

    /// Keeps `size` warm pods from now on, and tends them (and sweeps
    /// abandoned ones) every [`TICK`], the first time at once.
    pub(crate) fn start(&self, size: usize) {
        let first = {
            let mut state = self.state();
            state.size = size;
            !std::mem::replace(&mut state.started, true)
        };
        tracing::info!(size, replica = %self.shared.replica, "warm runner pod pool started");
        if first {
            self.spawn_tending();
        }
        self.refill();
    }

    /// Keeps no warm pods from now on and deletes the ready and starting
    /// ones, their room given back. A pod still being created when its
    /// delete is sent is deleted by its boot once it is up (it counts as
    /// shed), or, if this process is gone by then, by another server's sweep.
    pub(crate) async fn stop(&self) {
        let names: Vec<String> = {
            let mut state = self.state();
            state.size = 0;
            let ready: Vec<String> = state.ready.drain(..).map(|ready| ready.name).collect();
            metrics::warm_ready(BACKEND, 0);
            let booting: Vec<String> = state
                .booting
                .iter()
                .filter(|name| !state.shed.contains(*name))
                .cloned()
                .collect();
            state.shed.extend(booting.iter().cloned());
            ready.into_iter().chain(booting).collect()
        };
        for name in &names {
            self.shared.discard(name).await;
            self.shared.room.give_back();
        }
        tracing::info!(deleted = names.len(), "warm runner pod pool stopped");
    }

    /// The names of the ready warm pods, oldest first.
    pub(crate) fn ready(&self) -> Vec<String> {
        self.state()
            .ready
            .iter()
            .map(|ready| ready.name.clone())
            .collect()
    }

    /// A ready warm pod bound to `key` for good, as patched; `None` when
    /// the pool has none. Its replacement starts in the background.
    pub(crate) async fn claim(&self, key: &ReservationKey) -> Option<Pod> {
        loop {
            let popped = self.take_ready();
            let Some(warm) = popped else {
                self.refill();
                return None;
            };
            self.shared.room.give_back();
            let claimed = self.claim_one(&warm, key).await;
            self.refill();
            if let Some(pod) = claimed {
                tracing::info!(runner = %key.runner_name(), pod = %warm.name, "runner claimed a warm pod");
                metrics::warm_claimed(BACKEND);
                return Some(pod);
            }
        }
    }

    /// The oldest ready warm pod, out of the pool.
    fn take_ready(&self) -> Option<Ready> {
        let mut state = self.state();
        let popped = state.ready.pop_front();
        metrics::warm_ready(BACKEND, state.ready.len());
        popped
    }

    /// Claims `warm` for `key`, retrying while it is still a ready warm pod
    /// of this pool; one that cannot be claimed is deleted, unless another
    /// claim took it.
    async fn claim_one(&self, warm: &Ready, key: &ReservationKey) -> Option<Pod> {
        let pods = &self.shared.pods;
        let mut version = warm.resource_version.clone();
        for _ in 0..CLAIM_ATTEMPTS {
            match pods.claim(&warm.name, &version, key).await {
                Ok(Claim::Won(pod)) => return Some(*pod),
                Ok(Claim::Gone) => return None,
                Ok(Claim::Changed) => match pods.get(&warm.name).await {
                    Ok(Some(pod)) if !is_warm_of(&pod, &self.shared.replica) => return None,
                    Ok(Some(pod)) if matches!(state_of(&pod), PodState::Ready { .. }) => {
                        version = resource_version(&pod);
                    }
                    Ok(None) => return None,
                    Ok(Some(_)) => break,
                    Err(err) => {
                        tracing::warn!(pod = %warm.name, error = %err, "could not read a warm pod being claimed");
                        break;
                    }
                },
                Err(err) => {
                    tracing::warn!(pod = %warm.name, error = %err, "could not claim a warm pod");
                    break;
                }
            }
        }
        self.shared.discard(&warm.name).await;
        None
    }

    /// Deletes one warm pod to make room for an account's runner (a
    /// starting one when none is ready), its room given back before this
    /// returns; `false` when there is none.
    pub(crate) async fn shed(&self) -> bool {
        let victim = {
            let mut state = self.state();
            let popped = state.ready.pop_front();
            metrics::warm_ready(BACKEND, state.ready.len());
            match popped {
                Some(ready) => ready.name,
                None => {
                    let booting = state
                        .booting
                        .iter()
                        .find(|name| !state.shed.contains(*name))
                        .cloned();
                    let Some(name) = booting else { return false };
                    state.shed.insert(name.clone());
                    name
                }
            }
        };
        self.shared.discard(&victim).await;
        self.shared.room.give_back();
        tracing::info!(pod = %victim, "warm pod deleted to make room for a runner");
        true
    }

    /// Starts warm pods until the pool holds its size, while there is room.
    fn refill(&self) {
        loop {
            let name = {
                let mut state = self.state();
                let held =
                    (state.ready.len() + state.booting.len()).saturating_sub(state.shed.len());
                if state.resting || held >= state.size || !self.shared.room.take() {
                    return;
                }
                let name = format!("{WARM_NAME_PREFIX}{}", random_hex());
                state.booting.push(name.clone());
                name
            };
            let pool = self.clone();
            tokio::spawn(async move { pool.boot(name).await });
        }
    }

    /// Starts warm pod `name` into the pool (its room already taken).
    async fn boot(self, name: String) {
        let booted = self.shared.pods.boot(&name, &self.shared.replica).await;
        let was_shed = {
            let mut state = self.state();
            state.booting.retain(|booting| *booting != name);
            let was_shed = state.shed.remove(&name);
            if let (false, Ok(version)) = (was_shed, &booted) {
                state.ready.push_back(Ready {
                    name: name.clone(),
                    resource_version: version.clone(),
                });
                metrics::warm_ready(BACKEND, state.ready.len());
            }
            was_shed
        };
        match booted {
            Ok(_) if was_shed => self.shared.discard(&name).await,
            Ok(_) => tracing::debug!(pod = %name, "warm pod ready"),
            Err(err) => {
                self.shared.discard(&name).await;
                if was_shed {
                    return;
                }
                self.shared.room.give_back();
                tracing::warn!(pod = %name, error = %err, "a warm pod failed to start; refilling the pool later");
                self.state().resting = true;
                tokio::time::sleep(REFILL_REST).await;
                self.state().resting = false;
                self.refill();
            }
        }
    }

    /// What the pool does every [`TICK`]: vouches for its pods, replaces
    /// those that died or went away, and deletes abandoned warm pods of
    /// any server.
    pub(crate) async fn tend(&self) -> Result<(), SandboxError> {
        let before: HashSet<String> = self.ready().into_iter().collect();
        let listed = self.shared.pods.list().await?;
        let now = OffsetDateTime::now_utc();
        let alive: HashSet<&str> = listed
            .iter()
            .filter(|pod| matches!(state_of(pod), PodState::Ready { .. }))
            .filter_map(|pod| pod.metadata.name.as_deref())
            .collect();
        let (lost, vouch) = {
            let mut state = self.state();
            let (kept, lost): (VecDeque<Ready>, VecDeque<Ready>) =
                state.ready.drain(..).partition(|ready| {
                    !before.contains(&ready.name) || alive.contains(ready.name.as_str())
                });
            state.ready = kept;
            metrics::warm_ready(BACKEND, state.ready.len());
            let vouch: Vec<String> = state
                .ready
                .iter()
                .map(|ready| ready.name.clone())
                .chain(state.booting.iter().cloned())
                .collect();
            (lost, vouch)
        };
        for ready in &lost {
            tracing::info!(pod = %ready.name, "a warm pod died or went away; replacing it");
            self.shared.discard(&ready.name).await;
            self.shared.room.give_back();
        }
        for name in vouch {
            self.vouch(&name).await;
        }
        let mine: HashSet<String> = {
            let state = self.state();
            let ready = state.ready.iter().map(|ready| ready.name.clone());
            ready.chain(state.booting.iter().cloned()).collect()
        };
        for pod in &listed {
            let owned = pod
                .metadata
                .name
                .as_ref()
                .is_some_and(|name| mine.contains(name));
            if !owned && abandoned(pod, now, STALE) {
                self.shared.sweep(pod).await;
            }
        }
        self.refill();
        Ok(())
    }

    /// Renews warm pod `name`'s heartbeat, and the resource version its
    /// claim will be conditional on.
    async fn vouch(&self, name: &str) {
        match self.shared.pods.heartbeat(name).await {
            Ok(Some(pod)) => {
                let mut state = self.state();
                if let Some(ready) = state.ready.iter_mut().find(|ready| ready.name == name) {
                    ready.resource_version = resource_version(&pod);
                }
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(pod = %name, error = %err, "could not vouch for a warm pod"),
        }
    }

    /// Tends the pool every [`TICK`] until it is dropped.
    fn spawn_tending(&self) {
        let weak = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            loop {
                let Some(shared) = weak.upgrade() else { return };
                if let Err(err) = (WarmPool { shared }).tend().await {
                    tracing::warn!(error = %err, "tending the warm pod pool failed");
                }
                tokio::time::sleep(TICK).await;
            }
        });
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Deletes this pool's warm pod `name`, if it is still there.
    async fn discard(&self, name: &str) {
        if let Err(err) = self.pods.delete(name, Preconditions::default()).await {
            tracing::warn!(pod = %name, error = %err, "could not delete a warm pod");
        }
    }

    /// Deletes the abandoned warm pod `pod`, unless it changed since it was
    /// listed (a claim, a heartbeat).
    async fn sweep(&self, pod: &Pod) {
        let Some(name) = pod.metadata.name.as_deref() else {
            return;
        };
        let preconditions = Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
        };
        match self.pods.delete(name, preconditions).await {
            Ok(true) => tracing::info!(pod = %name, "abandoned warm pod deleted"),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(pod = %name, error = %err, "could not delete an abandoned warm pod")
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let names: Vec<String> = self
            .state()
            .ready
            .drain(..)
            .map(|ready| ready.name)
            .collect();
        metrics::warm_ready(BACKEND, 0);
        if names.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pods = self.pods.clone();
        runtime.spawn(async move {
            for name in names {
                let _ = pods.delete(&name, Preconditions::default()).await;
            }
        });
    }
}
