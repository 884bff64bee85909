//! The loops every process runs: the job loop (claims jobs and runs them,
//! up to a bound at once), the reaper (ends every wait that ran out), the
//! exit loop (`exits.rs`) and the webhook deliverer ([`crate::webhooks`]).
//! All stop at [`Lifecycle::shutdown`].
//!
//! The reaper judges a runner lost when nothing was heard from it for the
//! liveness timeout. A process that itself stalled (paused, starved) longer
//! than the liveness interval cannot have heard its runners meanwhile: its
//! reaper leaves silent runners alone for one liveness timeout after the
//! stall, so their pings (and finished outcomes) can land first. The stall
//! may come at any instruction, a pass's own included: silence is judged on
//! the clock of a transaction that began while the process was known to be
//! awake (`stall_watch.rs`).

use std::sync::Arc;

use tokio::sync::Semaphore;
use toolserver_store::async_results::LostRunners;
use toolserver_store::{
    async_results, async_turns, conversations, invoke_keys, jobs, mcp_tasks, processes,
    turn_streams, StoreError,
};
use uuid::Uuid;

use super::Lifecycle;
use crate::approvals::ApprovalSweep;
use crate::channels::ChannelPoster;
use crate::connections::AuthorizationSweep;
use crate::{metrics, webhooks};

/// Rows one reaper step handles at most.
const REAP_BATCH: i64 = 500;

/// Most conversations stored whole that one reaper pass moves into rows
/// (each may hold a conversation's full size limit).
const MOVE_BATCH: i64 = 20;

/// What one reaper pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Calls past their deadline (or heartbeat deadline) and MCP tasks past
    /// their TTL (their runner calls stopped), now `expired`.
    pub expired: u64,
    /// Calls whose runner stopped pinging, queued to launch again.
    pub relaunched: u64,
    /// Calls whose runner stopped pinging (or, launched before the server
    /// was upgraded, never pinged), now `failed`.
    pub silent_runners: u64,
    /// Groups left open after their job ended, now sealed.
    pub sealed_groups: u64,
    /// Turns failed because a job used up its attempts.
    pub exhausted_turns: usize,
    /// Turns failed because they had no way on.
    pub stuck_turns: usize,
    /// Finished turn streams removed after their retention.
    pub purged_streams: u64,
    /// Settled MCP tasks removed after their TTL.
    pub purged_tasks: u64,
    /// Idempotency keys of direct calls removed after their TTL.
    pub purged_invoke_keys: u64,
    /// Conversations held by turns of dead processes, stored as
    /// interrupted and freed.
    pub recovered_conversations: u64,
    /// Conversations stored whole by an earlier release, moved into rows.
    pub moved_conversations: u64,
    /// Approvals that expired undecided, and turns resumed after their
    /// resumption was lost.
    pub approvals: ApprovalSweep,
    /// Authorizations that lapsed, turns resumed after their resumption
    /// was lost, and connections refreshed (or refused) ahead of expiry.
    pub authorizations: AuthorizationSweep,
}

impl ReapReport {
    /// Adds this pass's actions to the reaper's counters.
    fn count(&self) {
        metrics::reaped("expired", self.expired);
        metrics::reaped("relaunched", self.relaunched);
        metrics::reaped("silent_runner", self.silent_runners);
        metrics::reaped("sealed_group", self.sealed_groups);
        metrics::reaped("exhausted_turn", self.exhausted_turns as u64);
        metrics::reaped("stuck_turn", self.stuck_turns as u64);
        metrics::reaped("moved_conversation", self.moved_conversations);
        metrics::reaped("purged_stream", self.purged_streams);
        metrics::reaped("purged_task", self.purged_tasks);
        metrics::reaped("purged_invoke_key", self.purged_invoke_keys);
        metrics::reaped("recovered_conversation", self.recovered_conversations);
        metrics::reaped("expired_approval", self.approvals.expired);
        metrics::reaped("resumed_approval", self.approvals.resumed);
        metrics::reaped("expired_authorization", self.authorizations.expired);
        metrics::reaped("resumed_authorization", self.authorizations.resumed);
        metrics::reaped(
            "refreshed_connection",
            self.authorizations.refresh.refreshed,
        );
        metrics::reaped("failed_connection", self.authorizations.refresh.failed);
    }
}

impl Lifecycle {
    /// Starts the job loop, the reaper (and its stall watch), the exit loop
    /// and the webhook deliverer.
    pub fn start_background(&self) {
        let (jobs, reaper, exits, watch) = (self.clone(), self.clone(), self.clone(), self.clone());
        let stop = self.0.stop.clone();
        self.0
            .tasks
            .spawn(async move { watch.0.stall_watch.run(stop).await });
        self.0.tasks.spawn(async move { jobs.job_loop().await });
        self.0
            .tasks
            .spawn(async move { reaper.reaper_loop().await });
        self.0.tasks.spawn(async move { exits.exit_loop().await });
        let harness = self.harness();
        let poster = ChannelPoster::new(self.pool().clone(), self.0.harness.clone());
        self.0.tasks.spawn(webhooks::deliver_until(
            self.pool().clone(),
            Arc::new(poster),
            harness.settings().webhooks,
            self.0.stop.clone(),
        ));
    }

    async fn job_loop(&self) {
        let settings = self.settings().clone();
        let permits = Arc::new(Semaphore::new(settings.max_concurrent_jobs.max(1)));
        let terms = self.claim_terms();
        let stop = self.0.stop.clone();
        loop {
            let permit = tokio::select! {
                () = stop.cancelled() => return,
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let claimed = tokio::select! {
                () = stop.cancelled() => return,
                claimed = jobs::claim(self.pool(), &terms, settings.max_attempts) => claimed,
            };
            match claimed {
                Ok(Some(job)) => self.spawn_run(job, Some(permit)),
                Ok(None) => {
                    drop(permit);
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(settings.poll) => {}
                    }
                }
                Err(err) => {
                    drop(permit);
                    tracing::warn!(error = %err, "could not claim a job");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(settings.poll) => {}
                    }
                }
            }
        }
    }

    async fn reaper_loop(&self) {
        let mut ticks = tokio::time::interval(self.settings().reaper_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the first pass comes one interval in.
        ticks.tick().await;
        let stop = self.0.stop.clone();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let watch = &self.0.stall_watch;
            let reaped = self.reap(&|| watch.heard_until_now()).await;
            match reaped {
                Ok(report) if report != ReapReport::default() => {
                    report.count();
                    tracing::info!(
                        expired = report.expired,
                        relaunched = report.relaunched,
                        silent_runners = report.silent_runners,
                        sealed_groups = report.sealed_groups,
                        exhausted_turns = report.exhausted_turns,
                        stuck_turns = report.stuck_turns,
                        purged_streams = report.purged_streams,
                        purged_tasks = report.purged_tasks,
                        purged_invoke_keys = report.purged_invoke_keys,
                        recovered_conversations = report.recovered_conversations,
                        moved_conversations = report.moved_conversations,
                        expired_approvals = report.approvals.expired,
                        resumed_approvals = report.approvals.resumed,
                        "reaper acted"
                    );
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "reaper pass failed"),
            }
        }
    }

    /// One reaper pass: expires calls past their deadline (stopping the
    /// runner calls of MCP tasks past their TTL), launches again
    /// (or fails) calls whose runner went silent, seals groups left open,
    /// fails turns whose job used up its attempts or that have no way on,
    /// recovers conversations held by turns of dead processes, and removes
    /// turn streams past their retention, MCP tasks and idempotency keys of
    /// direct calls past their TTL and the rows of processes dead longer
    /// than the streams' retention; and denies approvals past their expiry
    /// and resumes turns whose resumption after approvals was lost.
    pub async fn reap_once(&self) -> Result<ReapReport, StoreError> {
        self.reap(&|| true).await
    }

    /// [`Self::reap_once`], judging silent runners only if
    /// `heard_until_now` answers true once their transaction began (see
    /// [`async_results::settle_silent_runners`]).
    async fn reap(
        &self,
        heard_until_now: &(dyn Fn() -> bool + Sync),
    ) -> Result<ReapReport, StoreError> {
        let pool = self.pool();
        let settings = self.settings();
        let expired = self.expire_tasks(REAP_BATCH).await?
            + async_results::expire_due(pool, REAP_BATCH).await?;
        let silent = async_results::settle_silent_runners(
            pool,
            heard_until_now,
            settings.max_call_launches,
            settings.liveness_timeout,
            REAP_BATCH,
        )
        .await?
        .unwrap_or_default();
        let (relaunched, silent_runners) = (silent.relaunched, silent.failed);
        let sealed_groups =
            async_results::seal_orphaned_groups(pool, settings.unsealed_group_grace, REAP_BATCH)
                .await?;
        let exhausted =
            async_turns::fail_exhausted(pool, settings.max_attempts, REAP_BATCH).await?;
        let stuck = async_turns::fail_stuck(pool, settings.stuck_turn_grace, REAP_BATCH).await?;
        self.announce(&exhausted).await;
        self.announce(&stuck).await;
        let purged_streams =
            turn_streams::purge_finished(pool, self.0.harness.settings().streams.retention).await?;
        let purged_tasks = mcp_tasks::purge_expired(pool, REAP_BATCH).await?;
        let purged_invoke_keys = invoke_keys::purge_expired(pool, REAP_BATCH).await?;
        let recovered_conversations = self.recover_dead_holders(REAP_BATCH).await?;
        let moved_conversations = self.move_unmoved_conversations().await?;
        processes::purge_dead(pool, self.0.harness.settings().streams.retention).await?;
        let approvals = self.reap_approvals().await?;
        let authorizations = self.reap_authorizations().await?;
        Ok(ReapReport {
            expired,
            relaunched,
            silent_runners,
            sealed_groups,
            exhausted_turns: exhausted.len(),
            stuck_turns: stuck.len(),
            purged_streams,
            purged_tasks,
            purged_invoke_keys,
            recovered_conversations,
            moved_conversations,
            approvals,
            authorizations,
        })
    }

    /// Moves a batch of conversations stored whole by an earlier release
    /// into rows, until a pass finds none (none is stored whole after).
    async fn move_unmoved_conversations(&self) -> Result<u64, StoreError> {
        if !self
            .0
            .unmoved_left
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(0);
        }
        let moved = conversations::move_unmoved(self.pool(), MOVE_BATCH).await?;
        if moved == 0 {
            self.0
                .unmoved_left
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(moved)
    }

    /// Launches again the calls of lost runners that are safe to repeat
    /// (under the launch bound) and fails the others, their groups
    /// continuing as with any settlement: the path for workers seen to
    /// exit. Returns (relaunched, failed).
    pub(super) async fn settle_lost(
        &self,
        lost: LostRunners<'_>,
    ) -> Result<(u64, u64), StoreError> {
        let pool = self.pool();
        let settings = self.settings();
        let relaunched = async_results::relaunch_lost_runners(
            pool,
            lost,
            settings.max_call_launches,
            settings.liveness_timeout,
            REAP_BATCH,
        )
        .await?;
        let failed =
            async_results::fail_lost_runners(pool, lost, settings.max_call_launches, REAP_BATCH)
                .await?;
        Ok((relaunched, failed))
    }

    async fn announce(&self, settled: &[Uuid]) {
        for turn_id in settled {
            self.0.listener.turn_settled(*turn_id).await;
        }
    }
}
