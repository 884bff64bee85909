//! One account's admission state in this process: its limits as loaded, what
//! it holds now, and its rate buckets.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use toolserver_domain::{AccountId, AccountLimits, LimitKind};

use super::bucket::TokenBucket;
use super::refusal::Refusal;

/// How long a refused caller of a full concurrency limit is told to wait:
/// calls and turns end on their own time, so this is a polite guess.
pub const CONCURRENCY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What one account holds and may take.
pub struct AccountGate {
    account: AccountId,
    /// Its limits once loaded; `None` until then and after an invalidation.
    limits: RwLock<Option<AccountLimits>>,
    /// Bumped by every invalidation, so a load that raced one is not kept.
    generation: AtomicU64,
    calls: AtomicU32,
    turns: AtomicU32,
    buckets: Mutex<Buckets>,
}

struct Buckets {
    calls: TokenBucket,
    turns: TokenBucket,
    /// Refusals answered at once; past them a refusal is held.
    prompt_refusals: TokenBucket,
}

/// What a permit holds a place in.
#[derive(Debug, Clone, Copy)]
pub enum Held {
    /// A runner call in flight.
    Call,
    /// A turn running.
    Turn,
}

impl AccountGate {
    /// A gate for `account`, its buckets full of `defaults`' bursts and of
    /// `prompt_refusals` refusals a second.
    pub fn new(account: AccountId, defaults: &AccountLimits, prompt_refusals: u32) -> Self {
        let now = Instant::now();
        Self {
            account,
            limits: RwLock::new(None),
            generation: AtomicU64::new(0),
            calls: AtomicU32::new(0),
            turns: AtomicU32::new(0),
            buckets: Mutex::new(Buckets {
                calls: TokenBucket::full(defaults.call_burst, now),
                turns: TokenBucket::full(defaults.turn_burst, now),
                prompt_refusals: TokenBucket::full(prompt_refusals, now),
            }),
        }
    }

    /// The limits, if loaded, and the generation a load must match.
    pub fn loaded(&self) -> (Option<AccountLimits>, u64) {
        let generation = self.generation.load(Ordering::SeqCst);
        let limits = *self.limits.read().unwrap_or_else(PoisonError::into_inner);
        (limits, generation)
    }

    /// Keeps `limits` loaded for `generation` unless invalidated since.
    pub fn keep(&self, limits: AccountLimits, generation: u64) {
        let mut slot = self.limits.write().unwrap_or_else(PoisonError::into_inner);
        if self.generation.load(Ordering::SeqCst) == generation {
            *slot = Some(limits);
        }
    }

    /// Forgets the loaded limits: the next request loads them again.
    pub fn invalidate(&self) {
        let mut slot = self.limits.write().unwrap_or_else(PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::SeqCst);
        *slot = None;
    }

    /// How many of `held` the account holds in this process.
    pub fn in_use(&self, held: Held) -> u32 {
        self.counter(held).load(Ordering::SeqCst)
    }

    /// Takes one of `held` under `limits`, after a token from its rate.
    pub fn admit(self: &Arc<Self>, held: Held, limits: &AccountLimits) -> Result<Permit, Refusal> {
        self.take_token(held, limits)?;
        self.hold(held, limits)
    }

    /// Takes one of `held` under its concurrency limit (no token).
    pub fn hold(self: &Arc<Self>, held: Held, limits: &AccountLimits) -> Result<Permit, Refusal> {
        let kind = match held {
            Held::Call => LimitKind::ConcurrentCalls,
            Held::Turn => LimitKind::OpenTurns,
        };
        let limit = limits.get(kind);
        let counter = self.counter(held);
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                (now < limit).then_some(now + 1)
            })
            .map_err(|now| {
                Refusal::new(
                    &self.account,
                    kind,
                    limit,
                    CONCURRENCY_RETRY_AFTER,
                    format!(
                        "account {} has {now} {} at once; its limit is {kind} = {limit}",
                        self.account,
                        noun(held)
                    ),
                )
            })?;
        Ok(Permit {
            gate: Some(self.clone()),
            held,
        })
    }

    /// How long to hold `refusal` before answering it: nothing while the
    /// account is refused at most `prompt_refusals` times a second; past
    /// that (its clients retry without waiting) until its `Retry-After`,
    /// at most `longest`, so refusals cannot become a flood of their own.
    pub fn hold_for(&self, refusal: &Refusal, prompt_refusals: u32, longest: Duration) -> Duration {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let per_minute = prompt_refusals.saturating_mul(60);
        match buckets
            .prompt_refusals
            .take(per_minute, prompt_refusals, Instant::now())
        {
            Ok(()) => Duration::ZERO,
            Err(_) => refusal.retry_after.min(longest),
        }
    }

    /// Whole tokens left in `held`'s rate bucket.
    pub fn tokens_left(&self, held: Held, limits: &AccountLimits) -> u32 {
        let (per_minute, burst) = rate(held, limits);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        bucket(&mut buckets, held).remaining(per_minute, burst, Instant::now())
    }

    /// Whether the account holds nothing and its buckets are full: its gate
    /// may be dropped and made afresh later.
    pub fn is_idle(&self, limits: &AccountLimits) -> bool {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        self.in_use(Held::Call) == 0
            && self.in_use(Held::Turn) == 0
            && buckets
                .calls
                .is_full(limits.calls_per_minute, limits.call_burst, now)
            && buckets
                .turns
                .is_full(limits.turns_per_minute, limits.turn_burst, now)
    }

    /// Takes a token from `held`'s rate bucket (no concurrency place).
    pub fn take_token(&self, held: Held, limits: &AccountLimits) -> Result<(), Refusal> {
        let (per_minute, burst) = rate(held, limits);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        bucket(&mut buckets, held)
            .take(per_minute, burst, Instant::now())
            .map_err(|wait| {
                let kind = match held {
                    Held::Call => LimitKind::CallsPerMinute,
                    Held::Turn => LimitKind::TurnsPerMinute,
                };
                let burst_kind = match held {
                    Held::Call => LimitKind::CallBurst,
                    Held::Turn => LimitKind::TurnBurst,
                };
                Refusal::new(
                    &self.account,
                    kind,
                    per_minute,
                    wait,
                    format!(
                        "account {} started {} faster than its limit allows: {kind} = {per_minute}, {burst_kind} = {burst}",
                        self.account,
                        noun(held)
                    ),
                )
            })
    }

    fn counter(&self, held: Held) -> &AtomicU32 {
        match held {
            Held::Call => &self.calls,
            Held::Turn => &self.turns,
        }
    }
}

fn rate(held: Held, limits: &AccountLimits) -> (u32, u32) {
    match held {
        Held::Call => (limits.calls_per_minute, limits.call_burst),
        Held::Turn => (limits.turns_per_minute, limits.turn_burst),
    }
}

fn bucket(buckets: &mut Buckets, held: Held) -> &mut TokenBucket {
    match held {
        Held::Call => &mut buckets.calls,
        Held::Turn => &mut buckets.turns,
    }
}

fn noun(held: Held) -> &'static str {
    match held {
        Held::Call => "runner calls",
        Held::Turn => "turns",
    }
}

/// A place held in an account's concurrency limit, given back when dropped.
#[must_use = "the place is given back when the permit is dropped"]
pub struct Permit {
    gate: Option<Arc<AccountGate>>,
    held: Held,
}

impl Permit {
    /// A permit that holds nothing (admission is switched off).
    pub fn unlimited(held: Held) -> Self {
        Self { gate: None, held }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = &self.gate {
            gate.counter(self.held).fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit").field("held", &self.held).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> AccountLimits {
        AccountLimits {
            concurrent_calls: 1,
            open_turns: 1,
            pending_detached: 1,
            live_runners: 1,
            mcp_tasks: 1,
            calls_per_minute: 600,
            call_burst: 10,
            turns_per_minute: 600,
            turn_burst: 10,
        }
    }

    #[test]
    fn refusals_past_the_prompt_ones_are_held_until_retry_after_at_most_the_longest_hold() {
        let account = AccountId::parse("acct").unwrap();
        let gate = Arc::new(AccountGate::new(account, &limits(), 2));
        let _held = gate.admit(Held::Call, &limits()).unwrap();
        let refusal = gate.admit(Held::Call, &limits()).unwrap_err();
        assert_eq!(refusal.kind, LimitKind::ConcurrentCalls);
        let longest = Duration::from_millis(300);
        assert_eq!(gate.hold_for(&refusal, 2, longest), Duration::ZERO);
        assert_eq!(gate.hold_for(&refusal, 2, longest), Duration::ZERO);
        assert_eq!(gate.hold_for(&refusal, 2, longest), longest);
        let soon = Refusal {
            retry_after: Duration::from_millis(50),
            ..refusal
        };
        assert_eq!(gate.hold_for(&soon, 2, longest), Duration::from_millis(50));
    }

    #[test]
    fn a_dropped_permit_gives_its_place_back() {
        let account = AccountId::parse("acct").unwrap();
        let gate = Arc::new(AccountGate::new(account, &limits(), 2));
        let permit = gate.admit(Held::Turn, &limits()).unwrap();
        assert_eq!(gate.in_use(Held::Turn), 1);
        assert!(gate.admit(Held::Turn, &limits()).is_err());
        drop(permit);
        assert_eq!(gate.in_use(Held::Turn), 0);
        assert!(gate.admit(Held::Turn, &limits()).is_ok());
    }
}
