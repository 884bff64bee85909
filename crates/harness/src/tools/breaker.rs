//! A circuit breaker per (account, tool), in each server process: after
//! `failures` calls in a row that failed for their runner (lost, refused,
//! unreachable) or a sandbox limit, the tool's calls are answered at once
//! with an error saying so, without reaching a runner, for `open_for`; then
//! one call is let through as a probe: if it does not fail so, the breaker
//! closes, else it opens again. A call that fails in the tool itself, or
//! succeeds, counts as healthy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use toolserver_domain::AccountId;

use super::{Failure, FailureKind, ToolEvent, ToolEvents};

/// When breakers open and for how long.
#[derive(Debug, Clone, Copy)]
pub struct BreakerSettings {
    /// Runner or limit failures in a row that open a tool's breaker.
    pub failures: u32,
    /// How long an open breaker answers at once before it lets a probe
    /// through.
    pub open_for: Duration,
}

impl BreakerSettings {
    /// The defaults.
    pub const DEFAULT: Self = Self {
        failures: 5,
        open_for: Duration::from_secs(30),
    };
}

/// Where one tool's breaker stands.
#[derive(Debug, Clone, Copy)]
enum State {
    /// Calls pass; this many runner or limit failures in a row so far.
    Closed(u32),
    /// Calls are answered at once until then.
    Open(Instant),
    /// One probe is under way; other calls are answered at once.
    Probing,
}

/// The breakers of this process.
#[derive(Debug)]
pub struct Breakers {
    settings: BreakerSettings,
    states: Mutex<HashMap<(AccountId, String), State>>,
}

/// Why a call was answered at once.
struct Refused(Duration);

impl Breakers {
    /// Breakers on `settings`.
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            states: Mutex::default(),
        }
    }

    fn states(&self) -> std::sync::MutexGuard<'_, HashMap<(AccountId, String), State>> {
        self.states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a call of `key`'s tool may start now.
    fn admit(&self, key: &(AccountId, String)) -> Result<(), Refused> {
        let mut states = self.states();
        let state = states.entry(key.clone()).or_insert(State::Closed(0));
        match *state {
            State::Closed(_) => Ok(()),
            State::Open(until) if Instant::now() >= until => {
                *state = State::Probing;
                Ok(())
            }
            State::Open(until) => Err(Refused(until.saturating_duration_since(Instant::now()))),
            State::Probing => Err(Refused(Duration::ZERO)),
        }
    }

    /// Records how a call of `key`'s tool ended: `fault` when it failed for
    /// its runner or a limit.
    fn record(&self, key: &(AccountId, String), fault: bool) {
        let mut states = self.states();
        let state = states.entry(key.clone()).or_insert(State::Closed(0));
        *state = match (*state, fault) {
            (_, false) => State::Closed(0),
            (State::Closed(failures), true) if failures + 1 < self.settings.failures => {
                State::Closed(failures + 1)
            }
            (_, true) => {
                tracing::warn!(account = %key.0, tool = %key.1, "a tool's circuit breaker opened");
                State::Open(Instant::now() + self.settings.open_for)
            }
        };
    }
}

/// One tool's breaker, for an account.
#[derive(Debug, Clone)]
pub struct Breaker {
    breakers: Arc<Breakers>,
    key: (AccountId, String),
}

impl Breaker {
    /// The breaker of `account`'s tool `tool` among `breakers`.
    pub fn of(breakers: &Arc<Breakers>, account: &AccountId, tool: &str) -> Self {
        Self {
            breakers: breakers.clone(),
            key: (account.clone(), tool.to_owned()),
        }
    }

    /// `start`'s events if the breaker lets the call through (their end
    /// recorded), else a failure saying why at once.
    pub fn guard(&self, start: impl FnOnce() -> ToolEvents) -> ToolEvents {
        if let Err(Refused(wait)) = self.breakers.admit(&self.key) {
            let message = format!(
                "{} failed {} times in a row for its runner or a sandbox limit; its calls are \
                 refused without running for {} s more, then one is let through to see whether \
                 it recovered",
                self.key.1,
                self.breakers.settings.failures,
                wait.as_secs().max(1)
            );
            let failure = Failure::new(FailureKind::CircuitOpen, message);
            return futures::stream::once(async move { ToolEvent::Failed(failure) }).boxed();
        }
        let mut pending = Pending(Some(self.clone()));
        start()
            .map(move |event| {
                match &event {
                    ToolEvent::Output(_) => pending.settle(false),
                    ToolEvent::Failed(failure) => pending.settle(matches!(
                        failure.kind,
                        FailureKind::RunnerLost
                            | FailureKind::Unreachable
                            | FailureKind::LimitExceeded
                    )),
                    ToolEvent::Log { .. } | ToolEvent::Snapshot(_) | ToolEvent::Launched => {}
                }
                event
            })
            .boxed()
    }
}

/// A call let through, until its end is recorded; dropped before its end
/// (cancelled), it counts as healthy, so a cancelled probe does not hold
/// the breaker.
struct Pending(Option<Breaker>);

impl Pending {
    fn settle(&mut self, fault: bool) {
        if let Some(breaker) = self.0.take() {
            breaker.breakers.record(&breaker.key, fault);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.settle(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (AccountId, String) {
        (AccountId::parse("acct").unwrap(), "tool".to_owned())
    }

    #[test]
    fn it_opens_after_repeated_faults_and_closes_after_a_good_probe() {
        let breakers = Breakers::new(BreakerSettings {
            failures: 2,
            open_for: Duration::ZERO,
        });
        let key = key();
        breakers.record(&key, true);
        assert!(breakers.admit(&key).is_ok(), "one fault keeps it closed");
        breakers.record(&key, true);
        assert!(
            breakers.admit(&key).is_ok(),
            "the probe passes once open_for is over"
        );
        assert!(breakers.admit(&key).is_err(), "one probe at a time");
        breakers.record(&key, false);
        assert!(breakers.admit(&key).is_ok());
        assert!(breakers.admit(&key).is_ok());
    }

    #[test]
    fn an_open_breaker_refuses_until_its_time_is_over() {
        let breakers = Breakers::new(BreakerSettings {
            failures: 1,
            open_for: Duration::from_secs(60),
        });
        let key = key();
        breakers.record(&key, true);
        assert!(breakers.admit(&key).is_err());
        breakers.record(&key, false);
        assert!(breakers.admit(&key).is_ok());
    }
}
