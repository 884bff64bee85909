//! Waiting for something a test set going to become true.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`until`] waits.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Checks `check` every 50 ms until it holds.
///
/// # Panics
/// When it does not hold within [`PATIENCE`]; the message names `what`.
pub async fn until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_within(what, PATIENCE, check).await;
}

/// [`until`], giving up after `limit`.
///
/// # Panics
/// When `check` does not hold within `limit`; the message names `what`.
pub async fn until_within<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
