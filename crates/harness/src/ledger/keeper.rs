//! The ledger's upkeep, on every process: attempts whose server process
//! died are ended `server_lost`, and retention drops old payloads and rows.
//! Each statement takes a bounded number of rows, so a backlog is worked
//! off over several rounds.

use sqlx::PgPool;
use toolserver_store::tool_calls;

use super::LedgerSettings;

/// Rows one statement of the keeper touches.
const ROUND: i64 = 1000;

/// Runs the keeper on `pool` every `settings.keeper_interval`.
pub(super) fn spawn(pool: PgPool, settings: LedgerSettings) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(settings.keeper_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if pool.is_closed() {
                return;
            }
            keep(&pool, &settings).await;
        }
    });
}

async fn keep(pool: &PgPool, settings: &LedgerSettings) {
    match tool_calls::sweep_lost(pool, settings.lost_after, ROUND).await {
        Ok(0) => {}
        Ok(lost) => tracing::info!(
            attempts = lost,
            "ended the attempts of dead server processes"
        ),
        Err(err) => tracing::warn!(error = %err, "could not end dead processes' attempts"),
    }
    let pruned =
        tool_calls::prune(pool, settings.payload_retention, settings.retention, ROUND).await;
    if let Err(err) = pruned {
        tracing::warn!(error = %err, "could not apply the ledger's retention");
    }
}
