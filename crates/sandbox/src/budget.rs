//! The runner budget: an [`Executor`] around any other (local processes or
//! Kubernetes pods alike) that caps the runners live at once, server-wide
//! ([`BudgetSettings::max_live`]) and per account ([`AccountRunnerCaps`]).
//!
//! A call on a live runner goes straight through (one map lookup under a
//! lock). A call that needs a runner started while a cap is reached makes
//! room by stopping the least recently used idle runner (no call in flight
//! here, and its backend agrees it is idle: a worker still running detached
//! calls is not) — of any account for the server-wide cap, of its own
//! account for the account's cap. Until room is made it waits in its
//! account's queue; the queues are served in turn whenever a runner frees
//! up (a call ends and leaves its runner idle, a runner is stopped), so an
//! account with many waiting calls does not starve one with few. A call
//! waits at most [`BudgetSettings::queue_wait`] and at most
//! [`BudgetSettings::queue_depth`] calls of one account wait; past either,
//! it fails with [`SandboxError::Busy`], naming the cap that blocked it.
//!
//! A runner counts as live from the moment its start is decided until the
//! budget stops it or its backend reports it stopped
//! ([`Executor::watch_stops`]), so the runners live never exceed the caps.
//! A call holds its runner until its frame stream ends.
//!
//! The backend's warm runners ([`Executor::govern_warm`]) count against
//! the server-wide cap while they wait to be claimed; one is started only
//! into room no call waits for, and one is discarded
//! ([`Executor::shed_warm`]) before any account's idle runner is stopped
//! when the server-wide cap blocks a call.

mod caps;
mod ledger;
mod queue;

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};
use toolserver_domain::AccountId;

pub use caps::{AccountRunnerCaps, BudgetSettings, FixedRunnerCaps};
use ledger::{Admission, Eviction, Ledger, Refusal, EVICTION_RETRY};

use crate::{
    metrics, Executor, FrameStream, InvokeRequest, ReservationKey, RunnerExit, RunnerInfo,
    RunnerUsage, SandboxError, StopListener, WarmRoom,
};

/// Frames a call's forwarding holds before the caller reads them.
const FORWARD_BUFFER: usize = 64;

/// An [`Executor`] that holds another to the runner caps.
pub struct RunnerBudget {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Arc<dyn Executor>,
    ledger: Mutex<Ledger>,
    settings: BudgetSettings,
}

impl RunnerBudget {
    /// Holds `inner` to `settings` and each account's cap from `caps`.
    pub fn new(
        inner: Arc<dyn Executor>,
        settings: BudgetSettings,
        caps: Arc<dyn AccountRunnerCaps>,
    ) -> Self {
        let shared = Arc::new(Shared {
            ledger: Mutex::new(Ledger::new(settings.clone(), caps)),
            inner,
            settings,
        });
        let budget: Weak<Shared> = Arc::downgrade(&shared);
        let listener: StopListener = Arc::new(move |key: &ReservationKey| {
            if let Some(shared) = budget.upgrade() {
                let evictions = shared.ledger().stopped_by_backend(key);
                shared.evict(evictions);
            }
        });
        shared.inner.watch_stops(listener);
        shared
            .inner
            .govern_warm(Arc::new(BudgetWarmRoom(Arc::downgrade(&shared))));
        Self { shared }
    }
}

/// The budget's room for its backend's warm runners.
struct BudgetWarmRoom(Weak<Shared>);

impl WarmRoom for BudgetWarmRoom {
    fn take(&self) -> bool {
        self.0
            .upgrade()
            .is_some_and(|shared| shared.ledger().take_warm())
    }

    fn give_back(&self) {
        if let Some(shared) = self.0.upgrade() {
            let evictions = shared.ledger().warm_gone();
            shared.evict(evictions);
        }
    }
}

impl Shared {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call's hold on the runner of `key`: at once when it is live or
    /// there is room, else after waiting in turn.
    async fn admit(self: &Arc<Self>, key: &ReservationKey) -> Result<CallSlot, SandboxError> {
        let admission = self.ledger().admit(key);
        match admission {
            Admission::Go => {}
            Admission::Refused(err) => return Err(err),
            Admission::Wait { id, granted } => {
                let evictions = self.ledger().pump();
                self.evict(evictions);
                let waiting = Waiting {
                    shared: self.clone(),
                    key: key.clone(),
                    id,
                    since: Instant::now(),
                    granted: Some(granted),
                };
                waiting.outcome().await?;
            }
        }
        Ok(CallSlot {
            shared: self.clone(),
            key: key.clone(),
        })
    }

    /// Starts `evictions`, each in a task of its own.
    fn evict(self: &Arc<Self>, evictions: Vec<Eviction>) {
        for eviction in evictions {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                self.ledger().evicted(&eviction, false);
                continue;
            };
            let shared = self.clone();
            runtime.spawn(async move { shared.run_eviction(eviction).await });
        }
    }

    /// Stops the idle runner of `eviction` unless its backend finds it busy;
    /// one it keeps is asked again after [`EVICTION_RETRY`].
    async fn run_eviction(self: Arc<Self>, eviction: Eviction) {
        let Some(key) = &eviction.key else {
            let shed = self.inner.shed_warm().await;
            if !shed {
                // None to shed now: asked again after a while, not at once.
                tokio::time::sleep(EVICTION_RETRY).await;
            }
            let evictions = self.ledger().evicted(&eviction, shed);
            self.evict(evictions);
            return;
        };
        let stopped = match self.inner.stop_if_idle(key).await {
            Ok(stopped) => stopped,
            Err(err) => {
                tracing::warn!(runner = %key, error = %err, "could not stop an idle runner to make room");
                false
            }
        };
        if stopped {
            tracing::info!(runner = %key, for_account = %eviction.for_account, "stopped the least recently used idle runner to make room");
        }
        let evictions = self.ledger().evicted(&eviction, stopped);
        self.evict(evictions);
        if !stopped {
            tokio::time::sleep(EVICTION_RETRY).await;
            let evictions = self.ledger().pump();
            self.evict(evictions);
        }
    }
}

/// A waiting call's place in its account's queue; dropped before it was
/// served (the caller gave up), it leaves the queue, and dropped after, it
/// gives the runner back.
struct Waiting {
    shared: Arc<Shared>,
    key: ReservationKey,
    id: u64,
    since: Instant,
    /// Until the outcome is known.
    granted: Option<oneshot::Receiver<()>>,
}

impl Waiting {
    /// Waits for the call's turn, at most the queue wait; `Ok` once the
    /// call holds its runner.
    async fn outcome(mut self) -> Result<(), SandboxError> {
        let Some(granted) = self.granted.as_mut() else {
            return Ok(());
        };
        let served = tokio::time::timeout(self.shared.settings.queue_wait, granted).await;
        metrics::queue_waited(self.since.elapsed());
        let outcome = if matches!(served, Ok(Ok(()))) {
            Ok(())
        } else {
            // Served meanwhile unless it still waits: its receiver is kept
            // until it is out of the queue, so a grant cannot be lost.
            let mut ledger = self.shared.ledger();
            if ledger.withdraw(self.key.account(), self.id) {
                Err(ledger.refuse(self.key.account(), Refusal::WaitTimeout))
            } else {
                Ok(())
            }
        };
        self.granted = None;
        outcome
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // The receiver lives until the queue no longer holds the call.
        let Some(_granted) = self.granted.take() else {
            return;
        };
        let mut ledger = self.shared.ledger();
        if !ledger.withdraw(self.key.account(), self.id) {
            let evictions = ledger.release(&self.key);
            drop(ledger);
            self.shared.evict(evictions);
        }
    }
}

/// A call's hold on its runner, given back when dropped.
struct CallSlot {
    shared: Arc<Shared>,
    key: ReservationKey,
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        let evictions = self.shared.ledger().release(&self.key);
        self.shared.evict(evictions);
    }
}

/// Relays `frames` to the caller and gives `slot` back once they end
/// (the call's runner is busy until then, even if the caller stops reading).
fn hold_until_end(mut frames: FrameStream, slot: CallSlot) -> FrameStream {
    let (tx, rx) = mpsc::channel(FORWARD_BUFFER);
    tokio::spawn(async move {
        let mut reading = true;
        while let Some(frame) = frames.recv().await {
            if reading && tx.send(frame).await.is_err() {
                reading = false;
            }
        }
        drop(slot);
    });
    rx
}

#[async_trait]
impl Executor for RunnerBudget {
    async fn ensure(&self, key: &ReservationKey) -> Result<RunnerInfo, SandboxError> {
        let _slot = self.shared.admit(key).await?;
        self.shared.inner.ensure(key).await
    }

    async fn invoke(
        &self,
        key: &ReservationKey,
        request: InvokeRequest,
    ) -> Result<FrameStream, SandboxError> {
        let slot = self.shared.admit(key).await?;
        let frames = self.shared.inner.invoke(key, request).await?;
        Ok(hold_until_end(frames, slot))
    }

    async fn cancel(&self, key: &ReservationKey, call_id: &str) -> Result<bool, SandboxError> {
        self.shared.inner.cancel(key, call_id).await
    }

    async fn logs(&self, key: &ReservationKey, call_id: &str) -> Result<Value, SandboxError> {
        self.shared.inner.logs(key, call_id).await
    }

    async fn stop(&self, key: &ReservationKey) -> Result<(), SandboxError> {
        self.shared.ledger().begin_stop(key);
        let stopped = self.shared.inner.stop(key).await;
        let evictions = self.shared.ledger().end_stop(key, stopped.is_ok());
        self.shared.evict(evictions);
        stopped
    }

    fn exits(&self) -> broadcast::Receiver<RunnerExit> {
        self.shared.inner.exits()
    }

    async fn stop_if_idle(&self, key: &ReservationKey) -> Result<bool, SandboxError> {
        self.shared.ledger().begin_stop(key);
        let stopped = self.shared.inner.stop_if_idle(key).await;
        let evictions = self
            .shared
            .ledger()
            .end_stop(key, matches!(stopped, Ok(true)));
        self.shared.evict(evictions);
        stopped
    }

    fn usage(&self, account: &AccountId) -> RunnerUsage {
        RunnerUsage {
            live_runners: self.shared.ledger().live(account),
            ..self.shared.inner.usage(account)
        }
    }

    fn usage_all(&self) -> Vec<(AccountId, RunnerUsage)> {
        let mut all = self.shared.inner.usage_all();
        let ledger = self.shared.ledger();
        for (account, usage) in &mut all {
            usage.live_runners = ledger.live(account);
        }
        all
    }

    fn warnings(&self) -> Vec<String> {
        self.shared.inner.warnings()
    }

    fn watch_stops(&self, listener: StopListener) {
        self.shared.inner.watch_stops(listener);
    }

    fn govern_warm(&self, room: Arc<dyn WarmRoom>) {
        self.shared.inner.govern_warm(room);
    }

    async fn shed_warm(&self) -> bool {
        self.shared.inner.shed_warm().await
    }
}
