//! The budget's books: the runners that count as live (from the moment a
//! start is decided until they are stopped), each one's calls in flight and
//! last use, the waiting calls, and what to do whenever capacity may have
//! freed up: serve waiting calls in turn, then pick the least recently used
//! idle runners to stop for those still waiting. The backend's warm runners
//! (of no account) count against the server-wide cap too; they take only
//! room no call waits for, and are the first to go when the server-wide
//! cap blocks a call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use toolserver_domain::AccountId;

use super::queue::{FairQueue, Waiter};
use super::{AccountRunnerCaps, BudgetSettings};
use crate::{metrics, ReservationKey, SandboxError};

/// How long a runner its backend would not stop (it still runs detached
/// calls) is passed over before it is asked again.
pub(super) const EVICTION_RETRY: Duration = Duration::from_millis(500);

/// What the budget knows of one live runner.
struct Entry {
    /// Calls in flight on it through the budget.
    inflight: usize,
    /// When it was last used, on the ledger's clock.
    last_used: u64,
    /// A stop is under way; a call that arrives meanwhile clears it, and
    /// the runner then stays counted whatever the stop did.
    stopping: bool,
    /// When its backend last refused to stop it as busy.
    refused_at: Option<Instant>,
}

/// What a call gets when it asks for a runner.
pub(super) enum Admission {
    /// It counts as in flight on a live runner: go ahead.
    Go,
    /// It waits in its account's queue until `granted` fires.
    Wait {
        /// Its place in the queue.
        id: u64,
        /// Fires once it counts as in flight.
        granted: oneshot::Receiver<()>,
    },
    /// Its account's queue is full.
    Refused(SandboxError),
}

/// An idle runner to stop, to make room for a call of `for_account`.
pub(super) struct Eviction {
    /// The runner, or `None` for one of the backend's warm runners.
    pub key: Option<ReservationKey>,
    /// Whose waiting calls it makes room for.
    pub for_account: AccountId,
}

/// Why a waiting call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Its account's queue was full.
    QueueFull,
    /// No runner came free within the queue wait.
    WaitTimeout,
}

/// The books; the budget holds them under one lock.
pub(super) struct Ledger {
    settings: BudgetSettings,
    caps: Arc<dyn AccountRunnerCaps>,
    runners: HashMap<ReservationKey, Entry>,
    live_by_account: HashMap<AccountId, usize>,
    /// Runners with a call in flight.
    busy: usize,
    /// Ticks at every use, for least-recently-used order.
    clock: u64,
    queue: FairQueue,
    /// Evictions under way, by the account they make room for.
    evicting_for: HashMap<AccountId, usize>,
    next_waiter: u64,
    /// The (live, busy) figures last given to the metrics.
    published: (usize, usize),
    /// The backend's warm runners, counted against the server-wide cap.
    warm: usize,
    /// Warm runners being discarded to make room.
    shedding: usize,
}

impl Ledger {
    /// Empty books under `settings` and `caps`.
    pub fn new(settings: BudgetSettings, caps: Arc<dyn AccountRunnerCaps>) -> Self {
        Self {
            settings,
            caps,
            runners: HashMap::new(),
            live_by_account: HashMap::new(),
            busy: 0,
            clock: 0,
            queue: FairQueue::default(),
            evicting_for: HashMap::new(),
            next_waiter: 0,
            published: (0, 0),
            warm: 0,
            shedding: 0,
        }
    }

    /// Runners of `account` that count as live.
    pub fn live(&self, account: &AccountId) -> usize {
        self.live_by_account.get(account).copied().unwrap_or(0)
    }

    /// Asks for the runner of `key` for one call: a live runner takes it at
    /// once, as does a new one while both caps leave room and no call of
    /// the account waits; otherwise the call waits in its account's queue
    /// (and evictions may start: see [`Ledger::pump`]).
    pub fn admit(&mut self, key: &ReservationKey) -> Admission {
        if self.runners.contains_key(key) {
            self.call_started(key);
            return Admission::Go;
        }
        let account = key.account();
        let waiting = self.queue.waiting(account);
        if waiting == 0 && self.has_room(account) {
            self.start(key);
            return Admission::Go;
        }
        if waiting >= self.settings.queue_depth {
            return Admission::Refused(self.refuse(account, Refusal::QueueFull));
        }
        let (grant, granted) = oneshot::channel();
        let id = self.next_waiter;
        self.next_waiter += 1;
        self.queue.push(Waiter {
            id,
            key: key.clone(),
            grant,
        });
        Admission::Wait { id, granted }
    }

    /// Takes the waiting call `id` of `account` out of its queue; `false`
    /// when it was served meanwhile (it counts as in flight).
    pub fn withdraw(&mut self, account: &AccountId, id: u64) -> bool {
        self.queue.withdraw(account, id)
    }

    /// Takes room for one more warm runner: only while the server-wide cap
    /// leaves room and no call waits.
    pub fn take_warm(&mut self) -> bool {
        let room = self.runners.len() + self.warm < self.settings.max_live;
        if room && self.queue.is_empty() {
            self.warm += 1;
            return true;
        }
        false
    }

    /// A warm runner was claimed or discarded: its room is free.
    pub fn warm_gone(&mut self) -> Vec<Eviction> {
        self.warm = self.warm.saturating_sub(1);
        self.pump()
    }

    /// A call on `key` ended.
    pub fn release(&mut self, key: &ReservationKey) -> Vec<Eviction> {
        if self.call_ended(key) {
            self.pump()
        } else {
            Vec::new()
        }
    }

    /// A stop of `key` begins.
    pub fn begin_stop(&mut self, key: &ReservationKey) {
        if let Some(entry) = self.runners.get_mut(key) {
            entry.stopping = true;
        }
    }

    /// A stop of `key` ended, `stopped` or not: the runner no longer counts
    /// unless a call came meanwhile.
    pub fn end_stop(&mut self, key: &ReservationKey, stopped: bool) -> Vec<Eviction> {
        self.finish_stop(key, stopped);
        self.pump()
    }

    /// An eviction ended: `stopped`, or its backend kept the runner (busy).
    pub fn evicted(&mut self, eviction: &Eviction, stopped: bool) -> Vec<Eviction> {
        if let Some(count) = self.evicting_for.get_mut(&eviction.for_account) {
            *count -= 1;
            if *count == 0 {
                self.evicting_for.remove(&eviction.for_account);
            }
        }
        let Some(key) = &eviction.key else {
            // A warm runner shed gave its room back before this.
            self.shedding = self.shedding.saturating_sub(1);
            return self.pump();
        };
        if stopped {
            if self.finish_stop(key, true) {
                metrics::budget_evicted();
            }
        } else if let Some(entry) = self.runners.get_mut(key) {
            entry.stopping = false;
            entry.refused_at = Some(Instant::now());
        }
        self.pump()
    }

    /// The backend stopped `key` by itself: unless a call or a stop is
    /// under way on it, it no longer counts.
    pub fn stopped_by_backend(&mut self, key: &ReservationKey) -> Vec<Eviction> {
        match self.runners.get(key) {
            Some(entry) if entry.inflight == 0 && !entry.stopping => {
                self.forget(key);
                self.pump()
            }
            _ => Vec::new(),
        }
    }

    /// Serves waiting calls in turn while there is room, then picks the
    /// idle runners to stop for those still waiting: the least recently
    /// used of their account when the account's cap blocks them, of any
    /// account when the server-wide cap does. As many as the distinct
    /// runners they wait for, less the evictions already under way for them.
    pub fn pump(&mut self) -> Vec<Eviction> {
        if self.queue.is_empty() {
            return Vec::new();
        }
        self.serve_in_turn();
        let now = Instant::now();
        let mut evictions = Vec::new();
        for account in self.queue.accounts() {
            let under_way = self.evicting_for.get(&account).copied().unwrap_or(0);
            let wanted = self
                .queue
                .runners_wanted(&account)
                .saturating_sub(under_way);
            for _ in 0..wanted {
                let own_cap = self.live(&account) >= self.cap(&account);
                if !own_cap && self.warm > self.shedding {
                    self.shedding += 1;
                    *self.evicting_for.entry(account.clone()).or_default() += 1;
                    evictions.push(Eviction {
                        key: None,
                        for_account: account.clone(),
                    });
                    continue;
                }
                let Some(key) = self.least_recently_used_idle(own_cap.then_some(&account), now)
                else {
                    break;
                };
                if let Some(entry) = self.runners.get_mut(&key) {
                    entry.stopping = true;
                }
                *self.evicting_for.entry(account.clone()).or_default() += 1;
                evictions.push(Eviction {
                    key: Some(key),
                    for_account: account.clone(),
                });
            }
        }
        evictions
    }

    /// Refuses a call of `account` for `why` (counted and logged): the
    /// error names the cap that blocked it and its value.
    pub fn refuse(&self, account: &AccountId, why: Refusal) -> SandboxError {
        let (live, cap) = (self.live(account), self.cap(account));
        let account_limit = live >= cap;
        let limit = if account_limit {
            format!("account {account} has {live} live runners, its limit (liveRunners = {cap})")
        } else {
            let warm = match self.warm {
                0 => String::new(),
                warm => format!(" and {warm} warm ones"),
            };
            format!(
                "the server has {} live runners{warm}, its limit (TOOLSERVER_RUNNER_MAX_LIVE = {})",
                self.runners.len(),
                self.settings.max_live
            )
        };
        let reason = match why {
            Refusal::QueueFull => format!(
                "{} calls of account {account} already wait for a runner, the queue's limit \
                 (TOOLSERVER_RUNNER_QUEUE_DEPTH = {}); {limit}",
                self.queue.waiting(account),
                self.settings.queue_depth
            ),
            Refusal::WaitTimeout => format!(
                "no runner came free within the queue wait \
                 (TOOLSERVER_RUNNER_QUEUE_WAIT_MS = {}); {limit}",
                self.settings.queue_wait.as_millis()
            ),
        };
        let reason_label = match why {
            Refusal::QueueFull => "queue_full",
            Refusal::WaitTimeout => "wait_timeout",
        };
        metrics::refused(
            reason_label,
            if account_limit { "account" } else { "global" },
        );
        tracing::info!(%account, %reason, "call refused: no runner");
        SandboxError::Busy {
            reason,
            retry_after: self.settings.retry_after(),
            account_limit,
        }
    }

    fn cap(&self, account: &AccountId) -> usize {
        self.caps.live_runners(account)
    }

    fn has_room(&self, account: &AccountId) -> bool {
        self.runners.len() + self.warm < self.settings.max_live
            && self.live(account) < self.cap(account)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// A call starts on the live runner of `key`.
    fn call_started(&mut self, key: &ReservationKey) {
        let tick = self.tick();
        let Some(entry) = self.runners.get_mut(key) else {
            return;
        };
        entry.inflight += 1;
        entry.last_used = tick;
        entry.stopping = false;
        if entry.inflight == 1 {
            self.busy += 1;
            self.publish();
        }
    }

    /// Ends a stop of `key`; `true` when the runner no longer counts (it was
    /// `stopped`, and no call came meanwhile).
    fn finish_stop(&mut self, key: &ReservationKey, stopped: bool) -> bool {
        let Some(entry) = self.runners.get_mut(key) else {
            return false;
        };
        if stopped && entry.stopping && entry.inflight == 0 {
            self.forget(key);
            return true;
        }
        entry.stopping = false;
        false
    }

    /// A call on `key` ended; `true` when that left its runner idle.
    fn call_ended(&mut self, key: &ReservationKey) -> bool {
        let tick = self.tick();
        let Some(entry) = self.runners.get_mut(key) else {
            return false;
        };
        entry.inflight = entry.inflight.saturating_sub(1);
        if entry.inflight > 0 {
            return false;
        }
        entry.last_used = tick;
        self.busy -= 1;
        self.publish();
        true
    }

    /// The runner of `key` counts as live from now on, with one call.
    fn start(&mut self, key: &ReservationKey) {
        let tick = self.tick();
        self.runners.insert(
            key.clone(),
            Entry {
                inflight: 1,
                last_used: tick,
                stopping: false,
                refused_at: None,
            },
        );
        *self
            .live_by_account
            .entry(key.account().clone())
            .or_default() += 1;
        self.busy += 1;
        self.publish();
    }

    /// The runner of `key` no longer counts.
    fn forget(&mut self, key: &ReservationKey) {
        let Some(entry) = self.runners.remove(key) else {
            return;
        };
        if entry.inflight > 0 {
            self.busy -= 1;
        }
        if let Some(live) = self.live_by_account.get_mut(key.account()) {
            *live -= 1;
            if *live == 0 {
                self.live_by_account.remove(key.account());
            }
        }
        self.publish();
    }

    /// Gives waiting calls their runner, account by account in turn, while
    /// their runner is live or there is room for it.
    fn serve_in_turn(&mut self) {
        let mut at = 0;
        while let Some(account) = self.queue.account_at(at).cloned() {
            let Some(key) = self.queue.first_key(&account).cloned() else {
                at += 1;
                continue;
            };
            if !self.runners.contains_key(&key) && !self.has_room(&account) {
                at += 1;
                continue;
            }
            for waiter in self.queue.serve(&account) {
                if self.runners.contains_key(&waiter.key) {
                    self.call_started(&waiter.key);
                } else {
                    self.start(&waiter.key);
                }
                if waiter.grant.send(()).is_err() {
                    self.call_ended(&waiter.key);
                }
            }
        }
    }

    /// The least recently used runner (of `account`, if given) with no call
    /// in flight and no stop under way, that its backend did not just
    /// refuse to stop.
    fn least_recently_used_idle(
        &self,
        account: Option<&AccountId>,
        now: Instant,
    ) -> Option<ReservationKey> {
        self.runners
            .iter()
            .filter(|(key, entry)| {
                entry.inflight == 0
                    && !entry.stopping
                    && entry
                        .refused_at
                        .is_none_or(|at| now.duration_since(at) >= EVICTION_RETRY)
                    && account.is_none_or(|account| key.account() == account)
            })
            .min_by_key(|(_, entry)| entry.last_used)
            .map(|(key, _)| key.clone())
    }

    /// Gives the metrics the runner counts when they changed.
    fn publish(&mut self) {
        let now = (self.runners.len(), self.busy);
        if now != self.published {
            self.published = now;
            metrics::budget_runners(now.0, now.1);
        }
    }
}

#[cfg(test)]
mod tests;
