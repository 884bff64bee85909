//! A request admission refused: which limit, its value, and when to retry.

use std::time::Duration;

use toolserver_domain::{AccountId, LimitKind};

/// Why admission refused a request.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The account refused.
    pub account: AccountId,
    /// The limit reached.
    pub kind: LimitKind,
    /// Its value for the account.
    pub value: u32,
    /// How long until a retry may pass.
    pub retry_after: Duration,
    /// What happened, naming the limit and its value.
    pub message: String,
}

impl Refusal {
    /// A refusal at `kind` = `value`.
    pub fn new(
        account: &AccountId,
        kind: LimitKind,
        value: u32,
        retry_after: Duration,
        message: String,
    ) -> Self {
        Self {
            account: account.clone(),
            kind,
            value,
            retry_after,
            message,
        }
    }

    /// `Retry-After` in whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        let secs = self.retry_after.as_secs_f64().ceil() as u64;
        secs.max(1)
    }
}
