//! The exit loop: a runner's worker that this process sees exit (the local
//! backend's workers are its children) takes its detached calls with it.
//! They are settled at once, on the reaper's path for lost runners: a call
//! safe to repeat is launched again (within its launch bound), any other
//! fails with how the worker ended, and its group continues once, as with
//! any settlement. Each call is named with the launch it ran as, so one
//! launched again since (after its pings were missed) is left alone. An
//! exit this loop misses (it lagged) is still caught by the reaper once the
//! calls' pings are missed.

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use toolserver_domain::ResultId;
use toolserver_sandbox::{LaunchedCall, RunnerExit};
use toolserver_store::async_results::LostRunners;
use toolserver_store::StoreError;

use super::Lifecycle;
use crate::metrics;

impl Lifecycle {
    /// Settles the calls of every worker exit the executor reports, until
    /// shutdown.
    pub(super) async fn exit_loop(&self) {
        let mut exits = self.0.executor.exits();
        let stop = self.0.stop.clone();
        loop {
            let exit = tokio::select! {
                () = stop.cancelled() => return,
                exit = exits.recv() => exit,
            };
            match exit {
                Ok(exit) => {
                    if let Err(err) = self.runner_exited(&exit).await {
                        tracing::warn!(error = %err, runner = %exit.runner, "could not settle the calls of a runner that exited; the reaper will once their pings are missed");
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "runner exits were missed; their calls settle once their pings are missed"
                    );
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Settles the detached calls `exit` took with it: launched again when
    /// safe to repeat, failed with how the worker ended otherwise. Returns
    /// (relaunched, failed).
    pub async fn runner_exited(&self, exit: &RunnerExit) -> Result<(u64, u64), StoreError> {
        let calls: Vec<(ResultId, i32)> = exit.calls.iter().filter_map(launch_of).collect();
        if calls.is_empty() {
            return Ok((0, 0));
        }
        let lost = LostRunners::Exited {
            calls: &calls,
            cause: &exit.cause,
        };
        let (relaunched, failed) = self.settle_lost(lost).await?;
        metrics::reaped("relaunched", relaunched);
        metrics::reaped("exited_runner", failed);
        tracing::info!(
            runner = %exit.runner,
            cause = %exit.cause,
            relaunched,
            failed,
            "settled the detached calls of a runner's worker that exited"
        );
        Ok((relaunched, failed))
    }
}

/// The call and launch a launched call's async metadata names.
fn launch_of(call: &LaunchedCall) -> Option<(ResultId, i32)> {
    let meta = &call.async_meta;
    let id = ResultId::parse(meta.get("resultId")?.as_str()?).ok()?;
    let launch = i32::try_from(meta.get("launch").and_then(Value::as_i64)?).ok()?;
    Some((id, launch))
}
