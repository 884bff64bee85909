//! Keeps every process's cached limits current: an operator's change
//! notifies `toolserver_account_limits` with the account id, and this
//! process drops what it cached for that account. A lost connection drops
//! everything cached (notices may have been missed meanwhile); idle
//! accounts' state is swept on the way.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use toolserver_domain::AccountId;
use toolserver_store::account_limits::CHANNEL;

use super::Admission;

/// How long to wait before listening again after the connection failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// How often idle accounts' state is swept.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

impl Admission {
    /// Listens for changed limits until `self` is dropped.
    pub fn spawn_listener(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let admission = Arc::downgrade(self);
        let pool = self.pool.clone();
        tokio::spawn(async move {
            loop {
                let err = listen(&pool, &admission).await;
                let Some(live) = admission.upgrade() else {
                    return;
                };
                live.invalidate_all();
                drop(live);
                if let Some(err) = err {
                    tracing::warn!(%err, "listening for changed account limits failed; retrying");
                }
                tokio::time::sleep(RECONNECT_DELAY).await;
            }
        })
    }
}

/// Relays notices until the connection fails (`Some`) or admission is
/// dropped (`None`).
async fn listen(pool: &PgPool, admission: &Weak<Admission>) -> Option<sqlx::Error> {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(err) => return Some(err),
    };
    if let Err(err) = listener.listen(CHANNEL).await {
        return Some(err);
    }
    // Limits loaded before the listener was up may be stale.
    admission.upgrade()?.invalidate_all();
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    loop {
        tokio::select! {
            received = listener.try_recv() => {
                let notification = match received {
                    Ok(Some(notification)) => notification,
                    // The connection was lost; the next receive makes it again.
                    Ok(None) => {
                        admission.upgrade()?.invalidate_all();
                        continue;
                    }
                    Err(err) => return Some(err),
                };
                let live = admission.upgrade()?;
                match AccountId::parse(notification.payload()) {
                    Ok(account) => live.invalidate(&account),
                    Err(_) => live.invalidate_all(),
                }
            }
            _ = sweep.tick() => admission.upgrade()?.sweep(),
        }
    }
}
