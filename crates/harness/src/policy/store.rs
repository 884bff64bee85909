//! Parsed policies, kept so a call is never judged by re-parsing text: an
//! account's layer per account, parsed again only when its stored version
//! changed (the stored text itself is read through the
//! [`ConfigCache`]); an agent's (or an end user's, or a conversation's)
//! layer by its text. Text stored before that no longer parses (it was
//! valid when saved) denies every call, fail closed, with an error logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use sqlx::PgPool;
use toolserver_domain::AccountId;
use toolserver_store::StoreError;

use super::layer::{Layer, LayerError};
use crate::config_cache::ConfigCache;

/// Most layers kept by their text (agents', end users', conversations').
const MAX_AGENT_LAYERS: usize = 4096;

/// Most accounts' layers kept.
const MAX_ACCOUNT_LAYERS: usize = 4096;

/// An account's parsed policies at one version.
#[derive(Debug, Clone)]
pub struct AccountPolicies {
    /// The stored version parsed.
    pub version: i64,
    /// The parsed layer.
    pub layer: Arc<Layer>,
}

/// This process's parsed policies.
#[derive(Debug, Default)]
pub struct PolicyCache {
    accounts: Mutex<HashMap<AccountId, AccountPolicies>>,
    agents: Mutex<HashMap<String, Arc<Layer>>>,
}

impl PolicyCache {
    /// The account layer of `account` as stored now (empty when it has
    /// none), its text read through `stored`.
    pub async fn account(
        &self,
        stored: &ConfigCache,
        pool: &PgPool,
        account: &AccountId,
    ) -> Result<Arc<Layer>, StoreError> {
        let record = stored.account_policies(pool, account).await?;
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(record) = record else {
            accounts.remove(account);
            return Ok(Arc::new(empty()));
        };
        if let Some(known) = accounts.get(account) {
            if known.version == record.version {
                return Ok(known.layer.clone());
            }
        }
        let layer = Arc::new(parse_stored(&record.text, account));
        if accounts.len() >= MAX_ACCOUNT_LAYERS && !accounts.contains_key(account) {
            accounts.clear();
        }
        let parsed = AccountPolicies {
            version: record.version,
            layer: layer.clone(),
        };
        accounts.insert(account.clone(), parsed);
        Ok(layer)
    }

    /// The layer of `text` (an agent's, an end user's or a conversation's),
    /// parsed once.
    pub fn agent(&self, text: &str) -> Result<Arc<Layer>, LayerError> {
        let mut agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(layer) = agents.get(text) {
            return Ok(layer.clone());
        }
        let layer = Arc::new(Layer::parse(text)?);
        if agents.len() >= MAX_AGENT_LAYERS {
            agents.clear();
        }
        agents.insert(text.to_owned(), layer.clone());
        Ok(layer)
    }
}

fn empty() -> Layer {
    Layer::default()
}

/// The text of the layer standing in for stored text that no longer parses.
const DENY_ALL: &str = r#"@id("stored-policies-unreadable") forbid(principal, action, resource);"#;

/// A layer that forbids every call (the test below shows [`DENY_ALL`]
/// parses, so the empty fallback is never taken).
pub(super) fn deny_all() -> Layer {
    Layer::parse(DENY_ALL).unwrap_or_default()
}

/// Parses stored `text`; text that no longer parses denies every call.
fn parse_stored(text: &str, account: &AccountId) -> Layer {
    Layer::parse(text).unwrap_or_else(|err| {
        tracing::error!(%account, error = %err, "stored policies no longer parse; every call is denied");
        deny_all()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stand_in_for_unreadable_policies_forbids_everything() {
        let layer = Layer::parse(DENY_ALL).unwrap();
        assert_eq!(layer.len(), 1);
    }
}
