//! Errors of the runner layer.

/// A runner could not be reached, started or used.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The runner process could not be started or did not become healthy.
    #[error("runner failed to start: {0}")]
    Start(String),
    /// Talking to the runner failed.
    #[error("runner transport error: {0}")]
    Transport(String),
    /// The runner refused the server's credentials (on a direct channel to
    /// a pod: the address now belongs to another runner, or the pod was
    /// replaced); nothing was run.
    #[error("runner refused the credentials: {0}")]
    Unauthorized(String),
    /// The runner answered something that is not the protocol.
    #[error("runner protocol error: {0}")]
    Protocol(String),
    /// Runners were to be isolated by bubblewrap, which cannot work on this
    /// machine (the reason says why).
    #[error("runners cannot be isolated: {0}")]
    Unisolated(String),
    /// No runner could be had in time: a cap on live runners was reached and
    /// the call's wait for one ran out (or its account's queue was full).
    #[error("runner capacity exhausted: {reason}")]
    Busy {
        /// Which limit, with its value, e.g. "account acct_x has 8 live
        /// runners, its limit (liveRunners = 8)".
        reason: String,
        /// When trying again may succeed.
        retry_after: std::time::Duration,
        /// Whether the account's own cap blocked the call (else the
        /// server-wide one did).
        account_limit: bool,
    },
    /// Local filesystem work for the runner failed.
    #[error("runner I/O error: {0}")]
    Io(#[from] std::io::Error),
}
