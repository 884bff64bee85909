//! The detached-turn lifecycle: turns no request waits for (`/async`,
//! NATS), whose uploaded async calls finish later through the completion
//! route, after which the turn continues exactly once.
//!
//! Sequence (states and moves: [`toolserver_domain::lifecycle`]):
//! 1. **launch** — the request's conversation lease passes to a new turn
//!    and its `start` job in one transaction; this process runs the job.
//! 2. **run** — a job (the first pass, or a group's continuation) holds a
//!    short claim, renewed while it runs, and the conversation under its
//!    own id. The model runs on the stored conversation (plus the group's
//!    results); each pass's detached calls form a group, sealed at the end
//!    of the pass. Model requests carry `Idempotency-Key: <job>.<pass>`.
//! 3. **commit** — conversation, job removal and turn status in one
//!    transaction: `failed` if the run failed, `waiting` while a group of
//!    the turn is open or another job is queued, else `completed`.
//! 4. **continue** — the transaction that settles a sealed group's last call
//!    (completion, stop, expiry, silent runner) enqueues its `continue` job.
//!
//! Order: one turn at a time writes to a conversation, and a later turn
//! waits until the earlier one's restored state is written. A lease held by
//! a job is never taken over by a request: the job is claimed again and
//! writes its turn's state first (a retried job whose earlier attempt
//! launched detached calls stores that pass, its calls included, before it
//! lets the conversation go). A group's continuation continues the last
//! assistant message only when that message made the group's calls;
//! otherwise later turns have run since, and it answers in a new message at
//! the end, so the conversation reads in the order things happened and the
//! model hears the results after what came since, never a later user
//! message as if it came first.
//!
//! Faults: a process that dies loses its claims as soon as its liveness row
//! lapses ([`LifecycleSettings::process_liveness`]; a claim of a process
//! that stopped renewing it lapses within [`LifecycleSettings::claim`]
//! either way), and another takes the job. A chat turn whose process died
//! is stored as far as its stream was recorded, marked interrupted, by the
//! next taker of its conversation or the reaper ([`recover`]). A runner's
//! worker that this process sees exit takes its detached calls with it:
//! they settle at once (`exits.rs`), as the reaper settles those of a
//! runner gone silent. A retried job whose earlier attempt launched
//! detached calls does not run the model again: it seals that attempt's
//! groups, which continue when their calls settle; otherwise it runs again
//! from the stored conversation, with the same request keys. The reaper
//! bounds every other wait: calls past their deadline expire, calls whose
//! runner stopped pinging are launched again when safe to repeat (up to
//! [`LifecycleSettings::max_call_launches`]) and fail otherwise (a call
//! launched before an upgrade by a runner that never pings counts as
//! silent from the upgrade on), groups left open are sealed, and jobs past
//! [`LifecycleSettings::max_attempts`] or turns with no way on are failed
//! with a reason.

mod background;
mod detacher;
mod error;
mod exits;
mod launch;
mod lease;
mod messages;
mod process;
mod recover;
mod run;
mod stall_watch;
mod status;
mod stop;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolserver_sandbox::Executor;
use toolserver_store::jobs::ClaimTerms;
use toolserver_store::notified::Notifications;
use toolserver_store::DedicatedConnections;
use uuid::Uuid;

pub use background::ReapReport;
pub use error::LifecycleError;
pub use launch::{DetachedReply, DetachedStart};
pub use lease::{ConversationLease, LeaseError};
pub use messages::{MessageCache, PendingWrite, StoredMessages};
pub use process::ServerProcess;
pub use status::AccountStatus;
pub use tasks::{TaskLaunch, TaskTerms};

use crate::ledger::Ledger;
use crate::stream::StreamHub;
use crate::Harness;
use stall_watch::StallWatch;

/// Knobs of the detached lifecycle; each one is a server setting.
#[derive(Debug, Clone)]
pub struct LifecycleSettings {
    /// How long a job's claim lasts unless renewed (renewed every third).
    pub claim: Duration,
    /// How long the job loop sleeps when no job is available.
    pub poll: Duration,
    /// Most jobs one process runs at once.
    pub max_concurrent_jobs: usize,
    /// A job claimed this many times fails its turn.
    pub max_attempts: i32,
    /// How long a job waits when its conversation is busy.
    pub busy_backoff: Duration,
    /// How long a job waits after a failed attempt.
    pub retry_backoff: Duration,
    /// How often the reaper runs.
    pub reaper_interval: Duration,
    /// A pending call fails when its runner has not pinged for this long.
    pub liveness_timeout: Duration,
    /// How often runners ping while a detached call runs.
    pub liveness_interval: Duration,
    /// How long a runner keeps trying to deliver a detached call's outcome
    /// the server does not take (it stopped answering, or answers 429/5xx).
    pub completion_retry: Duration,
    /// A call safe to repeat is launched at most this many times in all.
    pub max_call_launches: i32,
    /// A server process that has not renewed its liveness row for this long
    /// is taken for dead: its conversations are recovered and its jobs
    /// claimed again (renewed every third of it).
    pub process_liveness: Duration,
    /// A group left unsealed this long after its job ended is sealed.
    pub unsealed_group_grace: Duration,
    /// A turn unchanged this long with no job and no open group is failed.
    pub stuck_turn_grace: Duration,
    /// An approval undecided this long expires: the call is denied.
    pub approval_ttl: Duration,
    /// A turn whose approvals were all decided this long ago without
    /// resuming is resumed by the reaper (likewise a turn whose calls'
    /// authorizations all completed).
    pub approval_resume_grace: Duration,
    /// An authorization a call waits on lapses this long after it was
    /// asked for: the call fails.
    pub authorization_ttl: Duration,
    /// Connections whose access tokens lapse within this long are
    /// refreshed by the reaper.
    pub connection_refresh_ahead: Duration,
}

impl LifecycleSettings {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        claim: Duration::from_secs(10),
        poll: Duration::from_millis(200),
        max_concurrent_jobs: 64,
        max_attempts: 5,
        busy_backoff: Duration::from_millis(250),
        retry_backoff: Duration::from_secs(1),
        reaper_interval: Duration::from_secs(1),
        liveness_timeout: Duration::from_secs(10),
        liveness_interval: Duration::from_secs(2),
        completion_retry: Duration::from_secs(300),
        max_call_launches: 3,
        process_liveness: Duration::from_secs(3),
        unsealed_group_grace: Duration::from_secs(30),
        stuck_turn_grace: Duration::from_secs(60),
        approval_ttl: Duration::from_secs(24 * 3600),
        approval_resume_grace: Duration::from_secs(10),
        authorization_ttl: Duration::from_secs(3600),
        connection_refresh_ahead: Duration::from_secs(300),
    };
}

impl Default for LifecycleSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Hears of detached turns that ended (e.g. to answer a NATS requester).
#[async_trait]
pub trait TurnListener: Send + Sync {
    /// The turn `turn_id` reached `completed` or `failed`.
    async fn turn_settled(&self, turn_id: Uuid);
}

/// A listener that hears nothing.
pub struct NoListener;

#[async_trait]
impl TurnListener for NoListener {
    async fn turn_settled(&self, _turn_id: Uuid) {}
}

/// The lifecycle engine: launches detached turns, runs their jobs, reaps.
#[derive(Clone)]
pub struct Lifecycle(Arc<Inner>);

struct Inner {
    pool: PgPool,
    harness: Arc<Harness>,
    executor: Arc<dyn Executor>,
    listener: Arc<dyn TurnListener>,
    streams: Arc<StreamHub>,
    process: ServerProcess,
    ledger: Ledger,
    messages: MessageCache,
    /// The connections turns start and end on.
    turn_connections: DedicatedConnections,
    /// Whether this process could have heard its runners' pings.
    stall_watch: StallWatch,
    /// Whether conversations stored whole by an earlier release may be
    /// left to move into rows (cleared by the first pass that finds none).
    unmoved_left: std::sync::atomic::AtomicBool,
    tasks: TaskTracker,
    stop: CancellationToken,
    /// When this process last swept connections for refresh.
    last_refresh_sweep: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Lifecycle {
    /// An engine over `pool`; runs reach runners through `executor`. Its
    /// turn streams hear their news through `notifications` (within a
    /// Tokio runtime).
    pub fn new(
        pool: PgPool,
        harness: Arc<Harness>,
        executor: Arc<dyn Executor>,
        listener: Arc<dyn TurnListener>,
        notifications: &mut Notifications,
    ) -> Self {
        let streams = StreamHub::start(
            pool.clone(),
            harness.settings().streams.clone(),
            notifications,
        );
        let process =
            ServerProcess::start(pool.clone(), harness.settings().lifecycle.process_liveness);
        let ledger = Ledger::start(
            pool.clone(),
            Some(process.id()),
            harness.settings().ledger.clone(),
        );
        let messages = MessageCache::new(harness.settings().conversation_cache_bytes);
        let turn_connections =
            DedicatedConnections::new(pool.clone(), harness.settings().turn_connections);
        let lifecycle = &harness.settings().lifecycle;
        let stall_watch = StallWatch::new(lifecycle.liveness_interval, lifecycle.liveness_timeout);
        Self(Arc::new(Inner {
            messages,
            turn_connections,
            stall_watch,
            unmoved_left: std::sync::atomic::AtomicBool::new(true),
            streams,
            process,
            ledger,
            pool,
            harness,
            executor,
            listener,
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
            last_refresh_sweep: std::sync::Mutex::new(None),
        }))
    }

    /// This process's view of turn streams.
    pub fn streams(&self) -> &Arc<StreamHub> {
        &self.0.streams
    }

    /// The ledger of this process's tool calls.
    pub fn ledger(&self) -> &Ledger {
        &self.0.ledger
    }

    /// This server process, as leases and claims name it.
    pub fn process(&self) -> &ServerProcess {
        &self.0.process
    }

    /// The terms on which this process claims jobs.
    fn claim_terms(&self) -> ClaimTerms {
        ClaimTerms {
            claim: self.settings().claim,
            process: self.0.process.id(),
        }
    }

    /// How long a turn's conversation lease lasts unless renewed.
    /// The conversations' messages this process keeps between turns.
    pub fn messages(&self) -> &MessageCache {
        &self.0.messages
    }

    fn turn_lease(&self) -> Duration {
        self.0.harness.settings().turn_lease
    }

    fn settings(&self) -> &LifecycleSettings {
        &self.0.harness.settings().lifecycle
    }

    /// Whether this process sweeps connections for refresh now: at most
    /// every `every`, so a provider that is down is asked again only that
    /// often.
    pub(crate) fn refresh_sweep_due(&self, every: Duration) -> bool {
        let mut last = self
            .0
            .last_refresh_sweep
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|at| at.elapsed() < every) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        true
    }

    /// The connections turns start and end on (see [`DedicatedConnections`]).
    pub(crate) fn turn_connections(&self) -> &DedicatedConnections {
        &self.0.turn_connections
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.0.pool
    }

    /// The agent engine turns run on.
    pub(crate) fn harness(&self) -> &Harness {
        &self.0.harness
    }

    /// Where runs reach runners.
    pub(crate) fn executor(&self) -> &Arc<dyn Executor> {
        &self.0.executor
    }

    /// Runs `work` (an adapter's loop, such as the NATS subscription) on the
    /// engine's task tracker, until it ends or the engine shuts down.
    pub fn spawn_loop<F>(&self, work: F) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let stop = self.0.stop.clone();
        self.0.tasks.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = work => {}
            }
        })
    }

    /// Stops the job loop, the reaper and the loops of [`Self::spawn_loop`],
    /// and waits up to `grace` for runs under way; a run still going after
    /// that is taken over by another process once its claim lapses. Then
    /// writes the attempts the ledger holds (waiting up to `grace` more).
    pub async fn shutdown(&self, grace: Duration) {
        self.0.stop.cancel();
        self.0.tasks.close();
        if tokio::time::timeout(grace, self.0.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "detached runs still going at shutdown; other processes will take them over"
            );
        }
        self.0.ledger.flush(grace).await;
        self.0.process.retire().await;
    }
}
