//! Finding an agent's channel with its secrets, for an inbound request
//! (before anything is known of its account) and for each outbound post.

use sqlx::PgPool;
use toolserver_domain::{AccountId, AgentConfig, AgentId, ChannelSetting};
use toolserver_store::StoreError;

use crate::{AgentLoadError, Harness};

/// Why a channel could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ChannelLookupError {
    /// No such agent, or it has no channel of that name.
    #[error("no such channel")]
    NotFound,
    /// The stored config no longer parses or unseals.
    #[error("the agent's config cannot be read: {0}")]
    Unreadable(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Channel `name` of `account`'s agent `agent`, secrets in place.
pub async fn channel_setting(
    harness: &Harness,
    pool: &PgPool,
    account: &AccountId,
    agent: AgentId,
    name: &str,
) -> Result<ChannelSetting, ChannelLookupError> {
    let config = harness
        .stored_config(pool, account, agent)
        .await
        .map_err(|err| match err {
            AgentLoadError::NotFound => ChannelLookupError::NotFound,
            AgentLoadError::Store(store) => ChannelLookupError::Store(store),
            other => ChannelLookupError::Unreadable(other.to_string()),
        })?;
    let mut parsed = AgentConfig::parse(&config, &harness.settings().agent_limits)
        .map_err(|err| ChannelLookupError::Unreadable(err.to_string()))?;
    parsed
        .channels
        .remove(name)
        .ok_or(ChannelLookupError::NotFound)
}
