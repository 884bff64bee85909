//! A count per account (CPU microseconds, egress bytes) this process keeps
//! from its start: it only grows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One count per account.
#[derive(Clone, Default)]
pub(crate) struct AccountMeter {
    counts: Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>,
}

impl AccountMeter {
    /// The count of `account`, to add to.
    pub fn of(&self, account: &str) -> Arc<AtomicU64> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get(account) {
            return count.clone();
        }
        let count = Arc::new(AtomicU64::new(0));
        counts.insert(account.to_owned(), count.clone());
        count
    }

    /// The count of `account` so far.
    pub fn read(&self, account: &str) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(account)
            .map_or(0, |count| count.load(Ordering::Relaxed))
    }
}
