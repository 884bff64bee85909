//! Pod address blocks: every live fake cluster in a process gets a loopback
//! /16 of its own, so clusters of tests running side by side never hand out
//! the same pod address (a worker listening on another test's pod IP and
//! port would answer for it).

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// The second octets handed out: 127.100.0.0/16 to 127.249.0.0/16.
const BLOCKS: std::ops::RangeInclusive<u8> = 100..=249;

static IN_USE: Mutex<BTreeSet<u8>> = Mutex::new(BTreeSet::new());

/// One cluster's address block, given back when dropped.
#[derive(Debug)]
pub(super) struct PodNetwork(u8);

impl PodNetwork {
    /// The lowest block no live cluster holds.
    ///
    /// # Panics
    /// When every block is taken (more than 150 live clusters).
    pub(super) fn take() -> Self {
        let mut in_use = IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
        let free = BLOCKS
            .clone()
            .find(|block| !in_use.contains(block))
            .expect("a free loopback block for a fake cluster's pods");
        in_use.insert(free);
        Self(free)
    }

    /// The `n`th address of the block (0-based, below 250 × 254).
    pub(super) fn address(&self, n: usize) -> String {
        format!("127.{}.{}.{}", self.0, n / 254, n % 254 + 1)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        IN_USE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_clusters_never_share_an_address() {
        let first = PodNetwork::take();
        let second = PodNetwork::take();
        assert_ne!(first.address(0), second.address(0));
        let block = first.address(0);
        let block = block.rsplitn(3, '.').nth(2).unwrap_or_default();
        assert_eq!(first.address(0), format!("{block}.0.1"));
        assert_eq!(first.address(254), format!("{block}.1.1"));
    }
}
