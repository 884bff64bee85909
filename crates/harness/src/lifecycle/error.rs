//! Why a run of a detached turn did not commit.

use toolserver_store::StoreError;

use super::lease::LeaseError;
use crate::stream::StreamError;

/// Why a run of a detached turn did not commit.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// Storage failed; the job is retried.
    #[error("storage failed: {0}")]
    Store(#[from] StoreError),
    /// The turn's agent was deleted: the turn fails.
    #[error("the agent was deleted")]
    AgentDeleted,
    /// The agent's config no longer passes its checks: the turn fails.
    #[error("the agent's config is no longer valid: {0}")]
    ConfigInvalid(String),
    /// The conversation could not be held or read.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The turn's stream could not be opened; retried unless retrying
    /// cannot help.
    #[error("the turn stream could not be opened: {0}")]
    Stream(#[from] StreamError),
    /// Another process holds the job now (this one stalled past its claim).
    #[error("the job's claim was lost to another process")]
    LostClaim,
    /// The job no longer held its conversation at commit; it is retried.
    #[error("the conversation's lease was lost before the run committed")]
    LostConversation,
    /// The turn cannot be serialized for storage: the turn fails.
    #[error("the conversation could not be stored: {0}")]
    Unstorable(String),
}

impl LifecycleError {
    /// Whether retrying cannot help, so the turn fails with this error.
    pub fn ends_the_turn(&self) -> bool {
        match self {
            Self::AgentDeleted | Self::ConfigInvalid(_) | Self::Unstorable(_) => true,
            Self::Lease(lease) => lease.is_permanent(),
            Self::Stream(stream) => !stream.is_transient(),
            Self::Store(_) | Self::LostClaim | Self::LostConversation => false,
        }
    }
}
