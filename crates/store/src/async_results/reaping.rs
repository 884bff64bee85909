//! Pending calls settled by the reaper rather than by their runner: past
//! their deadline, or their runner lost (failed, or queued to launch again
//! when safe to repeat).

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use toolserver_domain::{CallStatus, ResultId};
use uuid::Uuid;

use super::fan_in::{enqueue_if_ready, release_from_group};
use crate::status_sql::{CALL_PENDING, JOB_RELAUNCH};
use crate::StoreError;

/// Expires up to `limit` pending calls past their deadline (a missed
/// heartbeat included), settling them the way a completion would, so their
/// groups still continue (once). Returns how many expired. Safe to run from
/// several servers at once: rows are claimed with `SKIP LOCKED`.
#[tracing::instrument(skip(pool))]
pub async fn expire_due(pool: &PgPool, limit: i64) -> Result<u64, StoreError> {
    settle_due(
        pool,
        "expires_at <= now()",
        None,
        CallStatus::Expired,
        "the call did not complete before it expired",
        limit,
    )
    .await
}

/// Pending calls whose runner is lost, and how that was learned.
#[derive(Debug, Clone, Copy)]
pub enum LostRunners<'a> {
    /// Calls whose runner has not pinged before `alive_until`: any
    /// process's reaper finds them. The runner may still run; what is known
    /// is that nothing was heard from it for the liveness timeout.
    Silent,
    /// Calls whose worker the server running them saw exit: each is named
    /// with the launch it was (so a call launched again since is left
    /// alone), and `cause` says how the worker ended.
    Exited {
        /// Each call's id and launch number.
        calls: &'a [(ResultId, i32)],
        /// How the worker ended, e.g. "killed by signal 9 (SIGKILL)".
        cause: &'a str,
    },
}

impl LostRunners<'_> {
    /// The SQL condition naming these calls; `Exited` binds the ids and
    /// launches ([`Self::binds`]) as `$4` and `$5`.
    fn condition(&self) -> &'static str {
        match self {
            Self::Silent => "alive_until <= now()",
            Self::Exited { .. } => {
                "(id, launches) IN (SELECT * FROM unnest($4::uuid[], $5::int[]))"
            }
        }
    }

    /// The SQL condition naming those of these calls that may not be
    /// launched again: not safe to repeat, or launched `max_launches` times.
    fn not_to_relaunch(&self, max_launches: i32) -> String {
        format!(
            "{} AND (group_id IS NULL OR NOT (safe_to_repeat AND launches < {max_launches}))",
            self.condition()
        )
    }

    /// The ids and launches an `Exited` condition binds.
    fn binds(&self) -> Option<(Vec<ResultId>, Vec<i32>)> {
        match self {
            Self::Silent => None,
            Self::Exited { calls, .. } => Some(calls.iter().copied().unzip()),
        }
    }

    /// What the model reads of a call that failed for this.
    fn reason(&self) -> String {
        match self {
            Self::Silent => SILENT_RUNNER_ERROR.to_owned(),
            Self::Exited { cause, .. } => format!(
                "the tool's runner exited ({cause}) before it reported the call's outcome; the \
                 call was not run again"
            ),
        }
    }
}

/// What the model is told of a call whose runner was not heard from for
/// the liveness timeout: the runner may still run, but its pings stopped
/// reaching any server.
pub const SILENT_RUNNER_ERROR: &str = "no ping from the runner of this call was heard within \
     its liveness timeout before it reported an outcome (the server running it stopped \
     answering, or the runner was lost with it); the call was not run again";

/// What the model is told of a call launched before the server was upgraded
/// whose runner (of a release that never pinged) sent no outcome within the
/// liveness timeout after the upgrade.
pub const LEGACY_RUNNER_ERROR: &str = "the runner of this call stopped answering: it was \
     started before the server was upgraded, never reported that it was still running, and \
     sent no outcome after the upgrade; the call was not run again";

/// Fails up to `limit` pending calls whose runner is lost and that may not
/// be launched again (not safe to repeat, or launched `max_launches` times):
/// the model reads why. Returns how many.
#[tracing::instrument(skip(pool))]
pub async fn fail_lost_runners(
    pool: &PgPool,
    lost: LostRunners<'_>,
    max_launches: i32,
    limit: i64,
) -> Result<u64, StoreError> {
    let due = lost.not_to_relaunch(max_launches);
    let reason = lost.reason();
    settle_due(pool, &due, lost.binds(), CallStatus::Failed, &reason, limit).await
}

/// The calls of runners that never pinged, silent for `liveness` since the
/// upgrade.
fn legacy_condition(liveness: Duration) -> String {
    format!(
        "alive_until IS NULL \
         AND legacy_runner_since <= now() - make_interval(secs => {})",
        liveness.as_secs_f64()
    )
}

/// Queues a `relaunch` job for up to `limit` pending calls whose runner is
/// lost, that are safe to repeat and were launched fewer than
/// `max_launches` times; each gets `liveness` to be launched again.
/// Returns how many.
#[tracing::instrument(skip(pool))]
pub async fn relaunch_lost_runners(
    pool: &PgPool,
    lost: LostRunners<'_>,
    max_launches: i32,
    liveness: Duration,
    limit: i64,
) -> Result<u64, StoreError> {
    let mut conn = pool.acquire().await?;
    relaunch_in(&mut conn, lost, max_launches, liveness, limit).await
}

/// [`relaunch_lost_runners`] on `conn` (within its transaction, if any).
async fn relaunch_in(
    conn: &mut PgConnection,
    lost: LostRunners<'_>,
    max_launches: i32,
    liveness: Duration,
    limit: i64,
) -> Result<u64, StoreError> {
    let sql = format!(
        "WITH due AS ( \
             UPDATE async_tool_results SET launches = launches + 1, \
                 alive_until = now() + make_interval(secs => $2) \
             WHERE id IN (SELECT id FROM async_tool_results \
                          WHERE status = {CALL_PENDING} AND {} \
                            AND group_id IS NOT NULL AND safe_to_repeat AND launches < $1 \
                          ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED) \
             RETURNING id, account_id, group_id) \
         INSERT INTO continuation_outbox (id, kind, turn_id, account_id, call_id) \
         SELECT gen_random_uuid(), {JOB_RELAUNCH}, g.turn_id, due.account_id, due.id \
         FROM due JOIN dispatch_groups g ON g.id = due.group_id",
        lost.condition()
    );
    let query = sqlx::query(&sql)
        .bind(max_launches)
        .bind(liveness.as_secs_f64())
        .bind(limit);
    let query = match lost.binds() {
        Some((ids, launches)) => query.bind(ids).bind(launches),
        None => query,
    };
    Ok(query.execute(conn).await?.rows_affected())
}

/// What [`settle_silent_runners`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SilentRunners {
    /// Calls queued to launch again.
    pub relaunched: u64,
    /// Calls failed: not safe to repeat, out of launches, or launched by a
    /// release whose runners never pinged.
    pub failed: u64,
}

/// Settles up to `limit` calls of each kind whose runner went silent (as
/// [`relaunch_lost_runners`] and [`fail_lost_runners`] do with
/// [`LostRunners::Silent`]), all judged by the clock of one transaction,
/// read when it began. A call launched before the server was upgraded by a
/// runner that never pings fails once `liveness` has passed since the
/// upgrade with no outcome (the runner is gone, or will only ever report
/// late); nothing of that release declared a call safe to repeat.
///
/// `heard_until_now` is asked once the transaction has begun: it says
/// whether this process has been able to hear its runners' pings up to
/// then, and nothing is settled (`None`) when it has not. So a process
/// paused anywhere before that answer settles nothing on its clock, and one
/// paused after it judges as of before the pause: a ping it missed while
/// paused never fails a call.
#[tracing::instrument(skip(pool, heard_until_now))]
pub async fn settle_silent_runners(
    pool: &PgPool,
    heard_until_now: impl FnOnce() -> bool,
    max_launches: i32,
    liveness: Duration,
    limit: i64,
) -> Result<Option<SilentRunners>, StoreError> {
    let mut tx = pool.begin().await?;
    if !heard_until_now() {
        return Ok(None);
    }
    let silent = LostRunners::Silent;
    let relaunched = relaunch_in(&mut tx, silent, max_launches, liveness, limit).await?;
    let failed = settle_due_in(
        &mut tx,
        &silent.not_to_relaunch(max_launches),
        None,
        CallStatus::Failed,
        &silent.reason(),
        limit,
    )
    .await?;
    let legacy = settle_due_in(
        &mut tx,
        &legacy_condition(liveness),
        None,
        CallStatus::Failed,
        LEGACY_RUNNER_ERROR,
        limit,
    )
    .await?;
    tx.commit().await?;
    Ok(Some(SilentRunners {
        relaunched,
        failed: failed + legacy,
    }))
}

/// Settles up to `limit` pending calls matching `due` (a fixed SQL
/// condition, which may name `binds` as `$4` and `$5`) as `status` with
/// `error`, and lets their groups continue.
async fn settle_due(
    pool: &PgPool,
    due: &str,
    binds: Option<(Vec<ResultId>, Vec<i32>)>,
    status: CallStatus,
    error: &str,
    limit: i64,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let settled = settle_due_in(&mut tx, due, binds, status, error, limit).await?;
    tx.commit().await?;
    Ok(settled)
}

/// [`settle_due`] within the transaction `tx`.
async fn settle_due_in(
    tx: &mut PgConnection,
    due: &str,
    binds: Option<(Vec<ResultId>, Vec<i32>)>,
    status: CallStatus,
    error: &str,
    limit: i64,
) -> Result<u64, StoreError> {
    if status == CallStatus::Failed {
        // Every call this fails lost its runner; the ledger's trigger
        // records its attempt so (`migrations/0021_tool_calls.sql`).
        sqlx::query("SELECT set_config('toolserver.call_end', 'runner_lost', true)")
            .execute(&mut *tx)
            .await?;
    }
    let sql = format!(
        "UPDATE async_tool_results SET status = $1, settled_at = now(), error = $2 \
         WHERE id IN (SELECT id FROM async_tool_results \
                      WHERE status = {CALL_PENDING} AND {due} \
                      ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED) \
         RETURNING group_id"
    );
    let query = sqlx::query_as(&sql).bind(status).bind(error).bind(limit);
    let query = match binds {
        Some((ids, launches)) => query.bind(ids).bind(launches),
        None => query,
    };
    let settled: Vec<(Option<Uuid>,)> = query.fetch_all(&mut *tx).await?;
    let mut groups: Vec<Uuid> = settled.iter().filter_map(|(g,)| *g).collect();
    groups.sort();
    for group_id in &groups {
        release_from_group(tx, *group_id).await?;
    }
    groups.dedup();
    for group_id in groups {
        enqueue_if_ready(tx, group_id).await?;
    }
    Ok(settled.len() as u64)
}
