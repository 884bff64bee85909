//! Notices of changes to what a turn reads before it runs: every update or
//! delete of an agent, and every change to an account's policies or scoped
//! policies (cascades included), notifies [`CHANNEL`] from a trigger
//! (`migrations/0031_turn_config_notify.sql`). Changes to tools notify
//! [`crate::tools::CHANGED_CHANNEL`].

use toolserver_domain::{AccountId, AgentId};
use uuid::Uuid;

/// The channel the triggers notify.
pub const CHANNEL: &str = "toolserver_turn_config";

/// What one notice says changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    /// An agent of the account (payload `agent <account> <id>`).
    Agent(AccountId, AgentId),
    /// The account's policies (payload `policies <account>`).
    Policies(AccountId),
    /// One of the account's scoped policies (payload
    /// `scoped_policies <account>`).
    ScopedPolicies(AccountId),
}

impl ConfigChange {
    /// The change a notice's `payload` names; `None` when it names none
    /// this server knows.
    pub fn parse(payload: &str) -> Option<Self> {
        let mut words = payload.split(' ');
        let kind = words.next()?;
        let account = AccountId::parse(words.next()?).ok()?;
        let change = match (kind, words.next()) {
            ("agent", Some(id)) => {
                Self::Agent(account, AgentId::from_uuid(Uuid::parse_str(id).ok()?))
            }
            ("policies", None) => Self::Policies(account),
            ("scoped_policies", None) => Self::ScopedPolicies(account),
            _ => return None,
        };
        words.next().is_none().then_some(change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_triggers_send() {
        let account = AccountId::parse("acct_1").unwrap();
        let id = Uuid::now_v7();
        assert_eq!(
            ConfigChange::parse(&format!("agent acct_1 {id}")),
            Some(ConfigChange::Agent(account.clone(), AgentId::from_uuid(id)))
        );
        assert_eq!(
            ConfigChange::parse("policies acct_1"),
            Some(ConfigChange::Policies(account.clone()))
        );
        assert_eq!(
            ConfigChange::parse("scoped_policies acct_1"),
            Some(ConfigChange::ScopedPolicies(account))
        );
        for unknown in [
            "",
            "agent acct_1",
            "policies",
            "policies acct_1 x",
            "tools acct_1",
        ] {
            assert_eq!(ConfigChange::parse(unknown), None, "{unknown:?}");
        }
    }
}
