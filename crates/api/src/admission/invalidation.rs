//! Keeps every process's cached limits current: an operator's change
//! notifies `toolserver_account_limits` with the account id, and this
//! process drops what it cached for that account. A connection made or
//! lost drops everything cached (notices may have been missed meanwhile).
//! Idle accounts' state is swept on a timer of its own.

use std::sync::Arc;
use std::time::Duration;

use toolserver_domain::AccountId;
use toolserver_store::account_limits::CHANNEL;
use toolserver_store::notified::{Notifications, Notified};

use super::Admission;

/// How often idle accounts' state is swept.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

impl Admission {
    /// Follows changed limits through `notifications`, and sweeps idle
    /// accounts' state, until `self` is dropped.
    pub fn follow(self: &Arc<Self>, notifications: &mut Notifications) {
        notifications.subscribe(self, &[CHANNEL]);
        let admission = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut sweep = tokio::time::interval(SWEEP_EVERY);
            sweep.tick().await;
            loop {
                sweep.tick().await;
                let Some(live) = admission.upgrade() else {
                    return;
                };
                live.sweep();
            }
        });
    }
}

impl Notified for Admission {
    fn heard(&self, _channel: &str, payload: &str) {
        match AccountId::parse(payload) {
            Ok(account) => self.invalidate(&account),
            Err(_) => self.invalidate_all(),
        }
    }

    fn set_listening(&self, _listening: bool) {
        self.invalidate_all();
    }
}
