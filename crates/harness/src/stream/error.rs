//! Why a turn stream could not be opened or read.

use toolserver_store::StoreError;

use super::jetstream::LogError;

/// Why a turn stream could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Postgres failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The JetStream chunk log failed.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl StreamError {
    /// Whether trying again can help.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Store(_) => true,
            Self::Log(log) => log.is_transient(),
        }
    }
}
