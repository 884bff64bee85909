//! Admission: every request that starts work is checked against its
//! account's limits before any work starts, and refused cheaply (`429` with
//! `Retry-After`) when one is reached. Work already admitted is never
//! refused later: completions, heartbeats, continuations and resumes of a
//! running turn do not pass through here.
//!
//! Concurrency (runner calls, open turns) and rates (token buckets) are held
//! in this process, so a check costs a map lookup and an atomic; with several
//! server processes each holds an account to its limits on its own. Counts
//! that live in Postgres anyway (unfinished detached turns, open MCP tasks)
//! are counted there, on those routes only. An account's limits are the
//! deployment defaults with its stored overrides put over them, loaded once
//! and dropped when an operator changes them (`NOTIFY`, see `invalidation.rs`).
//!
//! Refusals are cheap but not free: past a few a second for one account
//! (its clients retry without waiting), each is held until its
//! `Retry-After` before it is answered, so refusals cannot become a flood.

mod bucket;
mod gate;
mod invalidation;
mod refusal;
mod runner_caps;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use toolserver_domain::{AccountId, AccountLimits, LimitKind};
use toolserver_store::{account_limits, StoreError};

pub use gate::{Held, Permit, CONCURRENCY_RETRY_AFTER};
pub use refusal::Refusal;
pub use runner_caps::AdmittedRunnerCaps;

use gate::AccountGate;

/// How admission is set up; each is a server setting.
#[derive(Debug, Clone)]
pub struct AdmissionSettings {
    /// Whether requests are checked at all.
    pub enabled: bool,
    /// The limits of an account without overrides.
    pub defaults: AccountLimits,
    /// Refusals of one account a second answered at once; past them each
    /// is held until its `Retry-After` (at most [`Self::refusal_hold`]).
    pub prompt_refusals: u32,
    /// The longest a refusal is held.
    pub refusal_hold: Duration,
}

impl AdmissionSettings {
    /// Admission off: nothing is checked (a deployment's limits come from
    /// its settings).
    pub const OFF: Self = {
        let unlimited = u32::MAX;
        Self {
            enabled: false,
            prompt_refusals: unlimited,
            refusal_hold: Duration::ZERO,
            defaults: AccountLimits {
                concurrent_calls: unlimited,
                open_turns: unlimited,
                pending_detached: unlimited,
                live_runners: unlimited,
                mcp_tasks: unlimited,
                calls_per_minute: unlimited,
                call_burst: unlimited,
                turns_per_minute: unlimited,
                turn_burst: unlimited,
            },
        }
    };
}

impl Default for AdmissionSettings {
    /// [`Self::OFF`].
    fn default() -> Self {
        Self::OFF
    }
}

/// Why a request was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// A limit is reached.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The account's limits or counts could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Every account's admission state in this process.
pub struct Admission {
    settings: AdmissionSettings,
    pool: PgPool,
    gates: Mutex<HashMap<AccountId, Arc<AccountGate>>>,
}

impl Admission {
    /// Admission for the accounts of `pool`'s database.
    pub fn new(pool: PgPool, settings: AdmissionSettings) -> Self {
        Self {
            settings,
            pool,
            gates: Mutex::new(HashMap::new()),
        }
    }

    /// Whether requests are checked.
    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// The deployment defaults.
    pub fn defaults(&self) -> &AccountLimits {
        &self.settings.defaults
    }

    /// Admits a runner call of `account` (a direct invoke or an MCP
    /// `tools/call`): a token from its call rate and a place among its
    /// concurrent calls, held until the permit is dropped.
    pub async fn call(&self, account: &AccountId) -> Result<Permit, AdmissionError> {
        self.admit(account, Held::Call).await
    }

    /// Admits a turn of `account` that streams to its caller: a token from
    /// its turn rate and a place among its open turns.
    pub async fn turn(&self, account: &AccountId) -> Result<Permit, AdmissionError> {
        self.admit(account, Held::Turn).await
    }

    /// Admits a detached turn of `account` (over HTTP or NATS): a token
    /// from its turn rate, while its unfinished detached turns are under
    /// their limit. The turn runs in the lifecycle, on any process; its
    /// runs are admitted work and hold no open-turn place.
    pub async fn detached_turn(&self, account: &AccountId) -> Result<(), AdmissionError> {
        if !self.enabled() {
            return Ok(());
        }
        let (gate, limits) = self.gate(account).await?;
        let pending = account_limits::pending_detached(&self.pool, account).await?;
        let admitted = refuse_at(
            account,
            LimitKind::PendingDetached,
            limits.pending_detached,
            pending,
            "unfinished detached turns",
        )
        .and_then(|()| gate.take_token(Held::Turn, &limits));
        self.answer(&gate, admitted).await
    }

    /// Admits a task-augmented MCP call of `account`: a token from its
    /// call rate, while its open tasks are under their limit. The task runs
    /// detached and holds no place among the concurrent calls.
    pub async fn mcp_task(&self, account: &AccountId) -> Result<(), AdmissionError> {
        if !self.enabled() {
            return Ok(());
        }
        let (gate, limits) = self.gate(account).await?;
        let open = account_limits::open_mcp_tasks(&self.pool, account).await?;
        let admitted = refuse_at(
            account,
            LimitKind::McpTasks,
            limits.mcp_tasks,
            open,
            "open MCP tasks",
        )
        .and_then(|()| gate.take_token(Held::Call, &limits));
        self.answer(&gate, admitted).await
    }

    /// The limits in force for `account`, what it holds in this process
    /// now, and the whole tokens left in its call and turn rates.
    pub async fn held(&self, account: &AccountId) -> Result<(AccountLimits, Holdings), StoreError> {
        let (gate, limits) = self.gate(account).await?;
        let holdings = Holdings {
            calls: gate.in_use(Held::Call),
            turns: gate.in_use(Held::Turn),
            call_tokens: gate.tokens_left(Held::Call, &limits),
            turn_tokens: gate.tokens_left(Held::Turn, &limits),
        };
        Ok((limits, holdings))
    }

    /// The limits of `account` as this process knows them now, without
    /// loading: the per-account runner cap asks this on every runner start.
    pub fn known_limits(&self, account: &AccountId) -> AccountLimits {
        self.gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(account)
            .and_then(|gate| gate.loaded().0)
            .unwrap_or(self.settings.defaults)
    }

    /// Forgets `account`'s loaded limits (its overrides changed).
    pub fn invalidate(&self, account: &AccountId) {
        let gate = self
            .gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(account)
            .cloned();
        if let Some(gate) = gate {
            gate.invalidate();
        }
    }

    /// Forgets every account's loaded limits (notices may have been missed).
    pub fn invalidate_all(&self) {
        let gates: Vec<_> = self
            .gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for gate in gates {
            gate.invalidate();
        }
    }

    /// Drops the gates of accounts that hold nothing and whose buckets are
    /// full, so idle accounts cost no memory.
    pub fn sweep(&self) {
        let defaults = self.settings.defaults;
        self.gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, gate| {
                let limits = gate.loaded().0.unwrap_or(defaults);
                Arc::strong_count(gate) > 1 || !gate.is_idle(&limits)
            });
    }

    async fn admit(&self, account: &AccountId, held: Held) -> Result<Permit, AdmissionError> {
        if !self.enabled() {
            return Ok(Permit::unlimited(held));
        }
        let (gate, limits) = self.gate(account).await?;
        let admitted = gate.admit(held, &limits);
        self.answer(&gate, admitted).await
    }

    /// `admitted` as the caller gets it: a refusal held first when the
    /// account is refused faster than its clients should retry.
    async fn answer<T>(
        &self,
        gate: &AccountGate,
        admitted: Result<T, Refusal>,
    ) -> Result<T, AdmissionError> {
        let refusal = match admitted {
            Ok(admitted) => return Ok(admitted),
            Err(refusal) => refusal,
        };
        let settings = &self.settings;
        let hold = gate.hold_for(&refusal, settings.prompt_refusals, settings.refusal_hold);
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        Err(refusal.into())
    }

    /// The account's gate and its limits, loading them when needed.
    async fn gate(
        &self,
        account: &AccountId,
    ) -> Result<(Arc<AccountGate>, AccountLimits), StoreError> {
        let gate = {
            let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
            match gates.get(account) {
                Some(gate) => gate.clone(),
                None => {
                    let gate = Arc::new(AccountGate::new(
                        account.clone(),
                        &self.settings.defaults,
                        self.settings.prompt_refusals,
                    ));
                    gates.insert(account.clone(), gate.clone());
                    gate
                }
            }
        };
        let (loaded, generation) = gate.loaded();
        if let Some(limits) = loaded {
            return Ok((gate, limits));
        }
        let overrides = account_limits::get(&self.pool, account).await?;
        let limits = self.settings.defaults.overridden_by(&overrides);
        gate.keep(limits, generation);
        Ok((gate, limits))
    }
}

/// What an account holds in this process, and its rates' tokens left.
#[derive(Debug, Clone, Copy)]
pub struct Holdings {
    /// Runner calls in flight.
    pub calls: u32,
    /// Turns running.
    pub turns: u32,
    /// Whole tokens left in the call rate.
    pub call_tokens: u32,
    /// Whole tokens left in the turn rate.
    pub turn_tokens: u32,
}

/// Refuses when `count` of `what` already reach `limit`.
fn refuse_at(
    account: &AccountId,
    kind: LimitKind,
    limit: u32,
    count: u32,
    what: &str,
) -> Result<(), Refusal> {
    if count < limit {
        return Ok(());
    }
    Err(Refusal::new(
        account,
        kind,
        limit,
        CONCURRENCY_RETRY_AFTER,
        format!("account {account} has {count} {what}; its limit is {kind} = {limit}"),
    ))
}
