//! Reservation keys: one per (account, tool). The key derives a stable,
//! DNS-label-safe runner name, so the same key always reaches the same runner
//! and two accounts never share one.

use std::fmt;

use sha2::{Digest, Sha256};
use toolserver_domain::{AccountId, ToolId};

/// Identifies the runner that serves one account's tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReservationKey {
    account: AccountId,
    tool: ToolId,
}

impl ReservationKey {
    /// The key for `tool` of `account`.
    pub fn new(account: AccountId, tool: ToolId) -> Self {
        Self { account, tool }
    }

    /// The account whose code runs there.
    pub fn account(&self) -> &AccountId {
        &self.account
    }

    /// The tool the runner serves.
    pub fn tool(&self) -> ToolId {
        self.tool
    }

    /// A deterministic runner name: `tr-` + 24 hex characters of
    /// SHA-256 over account and tool (a valid DNS label and file name).
    pub fn runner_name(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.account.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(self.tool.to_string().as_bytes());
        let digest = hex::encode(hasher.finalize());
        format!("tr-{}", &digest[..24])
    }
}

impl fmt::Display for ReservationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.account, self.tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_distinct_and_dns_safe() {
        let tool = ToolId::generate();
        let a = ReservationKey::new(AccountId::parse("a").unwrap(), tool);
        let a_again = ReservationKey::new(AccountId::parse("a").unwrap(), tool);
        let b = ReservationKey::new(AccountId::parse("b").unwrap(), tool);
        assert_eq!(a.runner_name(), a_again.runner_name());
        assert_ne!(a.runner_name(), b.runner_name());
        let name = a.runner_name();
        assert_eq!(name.len(), 27);
        assert!(name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
    }
}
