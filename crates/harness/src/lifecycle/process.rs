//! This server process's liveness row (see `toolserver_store::processes`):
//! renewed every third of [`LifecycleSettings::process_liveness`] over a
//! connection of its own, so a busy pool cannot make a live process look
//! dead, and marked dead at shutdown, once the runs it drained are done.
//! Conversation leases and job claims name [`ServerProcess::id`]; other
//! processes take over what a process held once its row stops being renewed.

use std::sync::Mutex;
use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toolserver_store::processes;
use uuid::Uuid;

/// This process as the others see it.
pub struct ServerProcess {
    id: Uuid,
    pool: PgPool,
    stop: CancellationToken,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl ServerProcess {
    /// A new process id whose row is kept alive for `liveness` at a time
    /// from now on, until [`Self::retire`] (within a Tokio runtime).
    pub fn start(pool: PgPool, liveness: Duration) -> Self {
        let id = Uuid::now_v7();
        let stop = CancellationToken::new();
        let keeper = tokio::spawn(keep_alive(pool.clone(), id, liveness, stop.clone()));
        Self {
            id,
            pool,
            stop,
            keeper: Mutex::new(Some(keeper)),
        }
    }

    /// The id leases and claims of this process name.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Stops renewing the row and marks it dead, so what this process still
    /// holds is taken over at once.
    pub async fn retire(&self) {
        self.stop.cancel();
        let keeper = self.keeper.lock().ok().and_then(|mut held| held.take());
        if let Some(keeper) = keeper {
            // Its last renewal, if one is under way, lands before the mark.
            let _ = keeper.await;
        }
        if let Err(err) = processes::mark_dead(&self.pool, self.id).await {
            tracing::warn!(error = %err, "could not mark this process dead; its leases lapse on their own");
        }
    }
}

/// Renews `id`'s row every third of `liveness` until `stop`.
async fn keep_alive(pool: PgPool, id: Uuid, liveness: Duration, stop: CancellationToken) {
    let options = pool.connect_options();
    let mut conn: Option<PgConnection> = None;
    let mut ticks = tokio::time::interval(liveness / 3);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if conn.is_none() {
            match PgConnection::connect_with(&options).await {
                Ok(opened) => conn = Some(opened),
                Err(err) => {
                    tracing::warn!(error = %err, "could not connect to renew this process's liveness");
                    continue;
                }
            }
        }
        let Some(open) = conn.as_mut() else { continue };
        if let Err(err) = processes::keep_alive(open, id, liveness).await {
            tracing::warn!(error = %err, "could not renew this process's liveness");
            conn = None;
        }
    }
}
