//! Fetch grants: what lets an uploaded tool's code ask the server to make
//! a request for it (`ctx.fetch`), with the account's secrets filled in by
//! the server. A grant names the account, the tool, the end user the call
//! acts for (whose connection it may use) and when it expires,
//! signed with a key derived from the server's secrets key, so any server
//! of the deployment checks it and nothing is stored per call.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use subtle::ConstantTimeEq;
use toolserver_domain::{AccountId, ToolId};
use toolserver_sandbox::FetchAccess;
use url::Url;

use crate::sealing::SecretBox;

/// Where a grant is presented, and whom it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchGrant {
    /// The account whose secrets the requests may use.
    pub account: AccountId,
    /// The tool making them (its egress allow list applies).
    pub tool: ToolId,
    /// The end user the call acts for (`""`: the account).
    pub user: String,
    /// Seconds since the Unix epoch after which the grant is refused.
    pub expires_at: u64,
}

const PREFIX: &str = "fgt2";

/// How long a grant outlives its call's deadline: a detached call may run
/// on past it while it heartbeats.
const GRACE: Duration = Duration::from_secs(300);

/// Hands calls their fetch access: the route's URL and a fresh grant.
#[derive(Clone)]
pub struct FetchMinter {
    /// The server's `POST /runner/fetch`, as runners reach it.
    pub url: Url,
    /// Signs the grants.
    pub sealer: SecretBox,
}

impl FetchMinter {
    /// Access for a call of `account`'s `tool` with deadline `timeout`.
    pub fn access(
        &self,
        (account, tool, user): (&AccountId, ToolId, &str),
        timeout: Duration,
    ) -> FetchAccess {
        let mut grant = FetchGrant::new(account.clone(), tool, timeout + GRACE);
        grant.user = user.to_owned();
        FetchAccess {
            url: self.url.to_string(),
            grant: grant.mint(&self.sealer),
        }
    }
}

impl FetchGrant {
    /// A grant for `account`'s `tool` that lasts `lifetime` from now.
    pub fn new(account: AccountId, tool: ToolId, lifetime: Duration) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            account,
            tool,
            user: String::new(),
            expires_at: (now + lifetime).as_secs(),
        }
    }

    /// The grant as the runner presents it:
    /// `fgt1~<account>~<tool>~<expiry>~<mac>` (`~` is in no account id).
    pub fn mint(&self, sealer: &SecretBox) -> String {
        let payload = self.payload();
        format!("{payload}~{}", hex::encode(sealer.mac(payload.as_bytes())))
    }

    /// The grant `presented` stands for, if its signature holds and it has
    /// not expired.
    pub fn verify(sealer: &SecretBox, presented: &str) -> Option<Self> {
        let (payload, mac) = presented.rsplit_once('~')?;
        let expected = sealer.mac(payload.as_bytes());
        let given = hex::decode(mac).ok()?;
        if !bool::from(expected.as_slice().ct_eq(given.as_slice())) {
            return None;
        }
        let mut parts = payload.split('~');
        let (Some(PREFIX), Some(account), Some(tool), Some(user), Some(expiry), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let grant = Self {
            account: AccountId::parse(account).ok()?,
            tool: ToolId::parse(tool)?,
            user: String::from_utf8(hex::decode(user).ok()?).ok()?,
            expires_at: expiry.parse().ok()?,
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
        (now <= grant.expires_at).then_some(grant)
    }

    fn payload(&self) -> String {
        format!(
            "{PREFIX}~{}~{}~{}~{}",
            self.account,
            self.tool,
            hex::encode(&self.user),
            self.expires_at
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_verifies_only_unchanged_unexpired_and_under_its_key() {
        let sealer = SecretBox::new(&[3; 32]);
        let account = AccountId::parse("acme.eu:team@x").unwrap();
        let grant = FetchGrant {
            user: "ann~with~tildes".into(),
            ..FetchGrant::new(account.clone(), ToolId::generate(), Duration::from_secs(60))
        };
        let token = grant.mint(&sealer);
        assert_eq!(FetchGrant::verify(&sealer, &token), Some(grant.clone()));
        assert_eq!(FetchGrant::verify(&SecretBox::new(&[4; 32]), &token), None);
        let mac = token.rsplit_once('~').unwrap().1;
        for other in [
            FetchGrant {
                account: AccountId::parse("other").unwrap(),
                ..grant.clone()
            },
            FetchGrant {
                user: "bob".into(),
                ..grant.clone()
            },
        ] {
            let forged = format!("{}~{mac}", other.payload());
            assert_eq!(FetchGrant::verify(&sealer, &forged), None);
        }
        let expired = FetchGrant {
            expires_at: 1,
            ..grant
        };
        assert_eq!(FetchGrant::verify(&sealer, &expired.mint(&sealer)), None);
        assert_eq!(FetchGrant::verify(&sealer, "fgt2~garbage"), None);
    }
}
