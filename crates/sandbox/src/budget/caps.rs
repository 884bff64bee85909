//! The budget's settings and where each account's cap comes from.

use std::time::Duration;

use toolserver_domain::AccountId;

/// How many runners one account may have live at once.
pub trait AccountRunnerCaps: Send + Sync + 'static {
    /// The most runners `account` may have live at once.
    fn live_runners(&self, account: &AccountId) -> usize;
}

/// The same cap for every account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedRunnerCaps(pub usize);

impl AccountRunnerCaps for FixedRunnerCaps {
    fn live_runners(&self, _account: &AccountId) -> usize {
        self.0
    }
}

/// Settings of the runner budget; each is a server setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetSettings {
    /// The most runners live at once across all accounts
    /// (`TOOLSERVER_RUNNER_MAX_LIVE`).
    pub max_live: usize,
    /// How long a call may wait for a runner (`TOOLSERVER_RUNNER_QUEUE_WAIT_MS`).
    pub queue_wait: Duration,
    /// How many calls of one account may wait at once
    /// (`TOOLSERVER_RUNNER_QUEUE_DEPTH`).
    pub queue_depth: usize,
}

impl BudgetSettings {
    /// When a refused call may try again: the queue wait, in whole seconds,
    /// at least one.
    pub fn retry_after(&self) -> Duration {
        Duration::from_secs(self.queue_wait.as_millis().div_ceil(1000).max(1) as u64)
    }
}
