//! The job outbox (`continuation_outbox`): every run of a detached turn.
//!
//! A `start` job is the turn's first pass; a `continue` job is one dispatch
//! group's continuation, enqueued by whichever transaction settles its last
//! call (see [`crate::async_results`]); a `relaunch` job launches a call
//! again whose runner died, when the call is safe to repeat. Delivery is at least
//! once: a job is claimed for `claim` with a fresh token, the claimer renews
//! it while it runs, and a claim that lapses (its process died) lets another
//! process take the job again. Only the holder of the current token can
//! finish a job ([`finish`] runs inside the run's commit), so a stalled
//! process that lost its claim cannot commit over its successor.
//!
//! Finished jobs are deleted, so the table holds only live work and the
//! claim query walks `continuation_outbox_available_idx` from the oldest
//! available job; its cost does not grow with history.

use std::time::Duration;

use sqlx::{FromRow, PgConnection, PgPool};
use toolserver_domain::ResultId;
use uuid::Uuid;

pub use crate::job_kind::JobKind;
use crate::status_sql::{JOB_CONTINUE, JOB_START};
use crate::StoreError;

/// A job held by one process.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct Job {
    /// The job id: the run's own event id (model request keys derive from it).
    pub id: Uuid,
    /// What it runs.
    pub kind: JobKind,
    /// The detached turn.
    pub turn_id: Uuid,
    /// The group it continues (`continue` jobs).
    pub group_id: Option<Uuid>,
    /// The call it launches again (`relaunch` jobs).
    pub call_id: Option<ResultId>,
    /// The owning account.
    pub account_id: String,
    /// How many times it has been claimed, this claim included.
    pub attempts: i32,
    /// This claim's token; every later write about the job names it.
    pub claim_token: Uuid,
}

/// How a process claims jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTerms {
    /// How long a claim lasts unless renewed.
    pub claim: Duration,
    /// The claiming server process: a claim of a process that stopped
    /// renewing its row (see [`crate::processes`]) lapses at once.
    pub process: Uuid,
}

/// SQL: whether the claim of job `o` lapsed, or its process died.
const CLAIM_LAPSED: &str = "(o.claim_expires_at IS NULL OR o.claim_expires_at < now() \
     OR EXISTS (SELECT 1 FROM server_processes p \
                WHERE p.id = o.claimed_by AND p.alive_until <= now()))";

const RETURNING: &str =
    "RETURNING id, kind, turn_id, group_id, call_id, account_id, attempts, claim_token";

/// Records the `start` job of a new turn, already claimed by the caller.
pub async fn insert_start(
    tx: &mut PgConnection,
    account: &str,
    turn_id: Uuid,
    claim: &ClaimTerms,
) -> Result<Job, StoreError> {
    Ok(sqlx::query_as(&format!(
        "INSERT INTO continuation_outbox \
             (id, kind, turn_id, account_id, attempts, claim_token, claim_expires_at, claimed_by) \
         VALUES ($1, {JOB_START}, $2, $3, 1, $4, now() + make_interval(secs => $5), $6) \
         {RETURNING}"
    ))
    .bind(Uuid::now_v7())
    .bind(turn_id)
    .bind(account)
    .bind(Uuid::new_v4())
    .bind(claim.claim.as_secs_f64())
    .bind(claim.process)
    .fetch_one(&mut *tx)
    .await?)
}

/// Enqueues the continuation of `group_id` (the caller has just won the
/// group's `continued_at`).
pub(crate) async fn insert_continue(
    tx: &mut PgConnection,
    account: &str,
    turn_id: Uuid,
    group_id: Uuid,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "INSERT INTO continuation_outbox (id, kind, turn_id, group_id, account_id) \
         VALUES ($1, {JOB_CONTINUE}, $2, $3, $4)"
    ))
    .bind(Uuid::now_v7())
    .bind(turn_id)
    .bind(group_id)
    .bind(account)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Claims the oldest available job that nobody holds (or whose holder's
/// process died) on `terms`; jobs claimed `max_attempts` times are left to
/// the reaper. Claimers never block each other (`SKIP LOCKED`).
#[tracing::instrument(skip(pool))]
pub async fn claim(
    pool: &PgPool,
    terms: &ClaimTerms,
    max_attempts: i32,
) -> Result<Option<Job>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "UPDATE continuation_outbox SET attempts = attempts + 1, claim_token = $1, \
             claim_expires_at = now() + make_interval(secs => $2), claimed_by = $4 \
         WHERE id = (SELECT o.id FROM continuation_outbox o \
                     WHERE o.available_at <= now() AND {CLAIM_LAPSED} AND o.attempts < $3 \
                     ORDER BY o.available_at LIMIT 1 FOR UPDATE SKIP LOCKED) {RETURNING}"
    ))
    .bind(Uuid::new_v4())
    .bind(terms.claim.as_secs_f64())
    .bind(max_attempts)
    .bind(terms.process)
    .fetch_optional(pool)
    .await?)
}

/// Extends a held claim to `claim` from now; false when it was lost.
pub async fn renew(pool: &PgPool, job: &Job, claim: Duration) -> Result<bool, StoreError> {
    let renewed = sqlx::query(
        "UPDATE continuation_outbox SET claim_expires_at = now() + make_interval(secs => $3) \
         WHERE id = $1 AND claim_token = $2",
    )
    .bind(job.id)
    .bind(job.claim_token)
    .bind(claim.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(renewed.rows_affected() == 1)
}

/// Gives a job back without counting the attempt (its conversation was
/// busy); it becomes available again after `backoff`, behind newer jobs.
pub async fn postpone(pool: &PgPool, job: &Job, backoff: Duration) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE continuation_outbox SET claim_token = NULL, claim_expires_at = NULL, \
             attempts = attempts - 1, available_at = now() + make_interval(secs => $3) \
         WHERE id = $1 AND claim_token = $2",
    )
    .bind(job.id)
    .bind(job.claim_token)
    .bind(backoff.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// Gives a job back after a failed attempt (it counts); retried after `backoff`.
pub async fn retry_later(
    pool: &PgPool,
    job: &Job,
    backoff: Duration,
    error: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE continuation_outbox SET claim_token = NULL, claim_expires_at = NULL, \
             last_error = $3, available_at = now() + make_interval(secs => $4) \
         WHERE id = $1 AND claim_token = $2",
    )
    .bind(job.id)
    .bind(job.claim_token)
    .bind(crate::text::storable(error))
    .bind(backoff.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// Removes a job the caller holds, in the caller's transaction; false when
/// the claim was lost (the transaction must then be rolled back).
pub async fn finish(tx: &mut PgConnection, job: &Job) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM continuation_outbox WHERE id = $1 AND claim_token = $2")
        .bind(job.id)
        .bind(job.claim_token)
        .execute(&mut *tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// A job that was claimed `max_attempts` times and is not held now.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct ExhaustedJob {
    /// The job id.
    pub id: Uuid,
    /// Its turn.
    pub turn_id: Uuid,
    /// The last attempt's error, if it recorded one.
    pub last_error: Option<String>,
}

/// Removes up to `limit` jobs that used up their attempts, in the caller's
/// transaction, and returns them (their turns are to be failed).
pub async fn take_exhausted(
    tx: &mut PgConnection,
    max_attempts: i32,
    limit: i64,
) -> Result<Vec<ExhaustedJob>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "DELETE FROM continuation_outbox WHERE id IN ( \
             SELECT o.id FROM continuation_outbox o \
             WHERE o.attempts >= $1 AND {CLAIM_LAPSED} \
             LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING id, turn_id, last_error"
    ))
    .bind(max_attempts)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?)
}
