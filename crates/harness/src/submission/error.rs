//! Why a submitted turn did not start.

use toolserver_domain::ValidationError;
use toolserver_store::StoreError;

use crate::lifecycle::{LeaseError, LifecycleError};
use crate::stream::StreamError;
use crate::AgentLoadError;

/// Why a submitted turn did not start; each front-end answers it in its
/// own form.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The agent could not be made ready to run.
    #[error(transparent)]
    Agent(#[from] AgentLoadError),
    /// The agent's config names something this server cannot run.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// A field of the request is malformed.
    #[error("{message}")]
    BadField {
        /// The request field, in its wire spelling.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// Approval decisions that answer no pending approval.
    #[error("{0}")]
    ApprovalNotPending(String),
    /// The conversation would grow past its limits.
    #[error("{0}")]
    TooLarge(String),
    /// The conversation could not be held.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The turn's stream could not be opened.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The detached turn could not be launched.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
}
