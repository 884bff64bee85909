//! The `async_turns` table: detached turns and their status. States and
//! moves: [`toolserver_domain::lifecycle`]. A turn's status changes only
//! in the transactions written here, each of which leaves a terminal turn
//! alone, so a turn settles once; the winning settlement names its event
//! (the job whose run ended the turn, or the turn itself for a reaper).

use std::borrow::Cow;
use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId, TurnStatus};
use uuid::Uuid;

use crate::conversation_messages::{stored_messages, MessageTail};
use crate::conversations::{free, store_and_free};
use crate::jobs::{self, Job};
use crate::status_sql::{TURNS_UNFINISHED, TURN_RUNNING, TURN_WAITING};
use crate::text::storable;
use crate::webhook_deliveries::{self, NewDelivery};
use crate::{accounts, async_results, channel_events, StoreError};

/// A detached turn's status.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AsyncTurnRecord {
    /// The status id.
    pub id: Uuid,
    /// The agent (none once it was deleted).
    pub agent_id: Option<Uuid>,
    /// The conversation it runs on.
    pub conversation_id: String,
    /// Where the turn stands.
    pub status: TurnStatus,
    /// The conversation's messages, once completed.
    pub messages: Option<Value>,
    /// What went wrong, once failed.
    pub error: Option<String>,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// Last change.
    pub updated_at: OffsetDateTime,
}

/// A new detached turn.
#[derive(Debug, Clone)]
pub struct NewTurn<'a> {
    /// The agent it runs.
    pub agent: AgentId,
    /// The conversation it runs on.
    pub conversation_id: &'a str,
    /// The conversation lease the request took; it passes to the start job.
    pub lease_holder: Uuid,
    /// Where a NATS requester hears the final result.
    pub reply_subject: Option<&'a str>,
    /// The channel event the turn answers, if a channel started it.
    pub channel_event: Option<Uuid>,
    /// The end user the turn acts for, if known.
    pub end_user: Option<&'a str>,
    /// The start job's first claim.
    pub claim: jobs::ClaimTerms,
}

/// Records a new running turn and its `start` job (claimed by the caller),
/// marks its channel event started, and hands the conversation lease from
/// the request to the job, in one transaction. Returns the turn id and the
/// job (`Conflict`: the channel event had started already).
pub async fn create(
    pool: &PgPool,
    account: &AccountId,
    turn: NewTurn<'_>,
) -> Result<(Uuid, Job), StoreError> {
    let id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    sqlx::query(
        "INSERT INTO async_turns (id, account_id, agent_id, conversation_id, reply_subject, \
             channel_event, end_user) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(id)
    .bind(account.as_str())
    .bind(turn.agent.as_uuid())
    .bind(turn.conversation_id)
    .bind(turn.reply_subject)
    .bind(turn.channel_event)
    .bind(turn.end_user.map(storable))
    .execute(&mut *tx)
    .await?;
    if let Some(event) = turn.channel_event {
        if !channel_events::mark_started(&mut tx, event, id).await? {
            return Err(StoreError::Conflict {
                constraint: "channel_events_started".to_owned(),
            });
        }
    }
    let job = jobs::insert_start(&mut tx, account.as_str(), id, &turn.claim).await?;
    let handed = sqlx::query(
        "UPDATE conversations SET active_turn = $4 \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3",
    )
    .bind(account.as_str())
    .bind(turn.conversation_id)
    .bind(turn.lease_holder)
    .bind(job.id)
    .execute(&mut *tx)
    .await?;
    if handed.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    tx.commit().await?;
    Ok((id, job))
}

/// Marks a turn whose run has started `running` (unless it has ended).
pub async fn mark_running(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "UPDATE async_turns SET status = {TURN_RUNNING}, updated_at = now() \
         WHERE id = $1 AND status IN {TURNS_UNFINISHED}"
    ))
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// How a run of a turn ended.
#[derive(Debug, Clone)]
pub enum RunEnd<'a> {
    /// The model is done for now: the conversation is `messages`.
    Finished(&'a Value),
    /// The run failed: the turn fails with this error (the conversation
    /// still becomes `messages`).
    Failed(&'a Value, &'a str),
    /// An earlier attempt of the job recorded detached calls and died before
    /// storing its pass: the conversation becomes `messages`, that pass as
    /// far as it was recorded, with its calls (their groups continue once
    /// the calls settle).
    Restored(&'a Value),
    /// The run did nothing: an earlier attempt of its job recorded detached
    /// calls (their groups continue once the calls settle), or its results
    /// are stored already. The conversation stays as stored.
    Skipped,
}

/// One run's commit: where the conversation lives and what it became.
#[derive(Debug, Clone)]
pub struct RunCommit<'a> {
    /// The owning account.
    pub account: &'a AccountId,
    /// The conversation.
    pub conversation_id: &'a str,
    /// The job whose run this is (and whose id holds the conversation).
    pub job: &'a Job,
    /// How the run ended.
    pub end: RunEnd<'a>,
    /// A post recorded with the commit (a channel's answer).
    pub reply: Option<&'a NewDelivery>,
}

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The turn now stands here.
    Turn(TurnStatus),
    /// The job's claim was lost to another process: nothing was written.
    LostClaim,
    /// The job no longer held the conversation: nothing was written.
    LostConversation,
}

/// Commits a run in one transaction: stores the conversation (if the job
/// still holds it) and releases it, records its reply, removes the job,
/// and moves the turn to
/// `failed` (the run failed), `waiting` (a group of the turn is still open,
/// or another job of it is queued) or `completed`.
pub async fn commit_run(pool: &PgPool, commit: RunCommit<'_>) -> Result<Committed, StoreError> {
    let job = commit.job;
    let mut tx = pool.begin().await?;
    if !jobs::finish(&mut tx, job).await? {
        return Ok(Committed::LostClaim);
    }
    let written = match commit.end {
        RunEnd::Finished(messages) | RunEnd::Failed(messages, _) | RunEnd::Restored(messages) => {
            Some(messages)
        }
        RunEnd::Skipped => None,
    };
    let saved = match written {
        Some(messages) => {
            let tail = MessageTail::whole(messages.as_array().map_or(&[], Vec::as_slice));
            store_and_free(
                &mut *tx,
                commit.account,
                commit.conversation_id,
                job.id,
                &tail,
            )
            .await?
            .is_some()
        }
        None => {
            free(&mut *tx, commit.account, commit.conversation_id, job.id).await?;
            true
        }
    };
    if !saved {
        return Ok(Committed::LostConversation);
    }
    if let Some(reply) = commit.reply {
        webhook_deliveries::insert(&mut tx, commit.account, commit.conversation_id, reply).await?;
    }
    let status = match commit.end {
        RunEnd::Failed(_, error) => {
            async_results::abandon_open_groups(&mut tx, job.turn_id).await?;
            settle(&mut tx, job.turn_id, job.id, Err(error)).await?;
            TurnStatus::Failed
        }
        _ if has_open_work(&mut tx, job.turn_id).await? => {
            sqlx::query(&format!(
                "UPDATE async_turns SET status = {TURN_WAITING}, updated_at = now() \
                 WHERE id = $1 AND status IN {TURNS_UNFINISHED}"
            ))
            .bind(job.turn_id)
            .execute(&mut *tx)
            .await?;
            TurnStatus::Waiting
        }
        _ => {
            let stored = match written {
                Some(messages) => Cow::Borrowed(messages),
                None => {
                    let (stored,): (Value,) = sqlx::query_as(concat!(
                        "SELECT ",
                        stored_messages!("c"),
                        " FROM conversations c WHERE c.account_id = $1 AND c.id = $2"
                    ))
                    .bind(commit.account.as_str())
                    .bind(commit.conversation_id)
                    .fetch_one(&mut *tx)
                    .await?;
                    Cow::Owned(stored)
                }
            };
            settle(&mut tx, job.turn_id, job.id, Ok(&stored)).await?;
            TurnStatus::Completed
        }
    };
    tx.commit().await?;
    Ok(Committed::Turn(status))
}

/// Whether the turn still has a group that has not continued, or a queued job.
async fn has_open_work(tx: &mut PgConnection, turn_id: Uuid) -> Result<bool, StoreError> {
    let (open,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM dispatch_groups WHERE turn_id = $1 AND continued_at IS NULL) \
             OR EXISTS (SELECT 1 FROM continuation_outbox WHERE turn_id = $1)",
    )
    .bind(turn_id)
    .fetch_one(&mut *tx)
    .await?;
    Ok(open)
}

/// Settles the turn once: `messages` when completed, `error` when failed.
/// Returns false when it had ended already.
async fn settle(
    tx: &mut PgConnection,
    id: Uuid,
    event_id: Uuid,
    outcome: Result<&Value, &str>,
) -> Result<bool, StoreError> {
    let (status, messages, error) = match outcome {
        Ok(messages) => (TurnStatus::Completed, Some(messages.to_string()), None),
        Err(error) => (TurnStatus::Failed, None, Some(storable(error).into_owned())),
    };
    let done = sqlx::query(&format!(
        "UPDATE async_turns SET status = $3, messages = $4::json, error = $5, \
             settle_event_id = $2, updated_at = now() \
         WHERE id = $1 AND status IN {TURNS_UNFINISHED}"
    ))
    .bind(id)
    .bind(event_id)
    .bind(status)
    .bind(messages)
    .bind(error)
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Fails a turn that cannot go on (its agent is gone, its config broke, a
/// reaper gave up on it): its open groups are abandoned, its queued jobs
/// dropped, and its conversation released if one of its jobs held it.
/// Returns false when the turn had ended already.
pub async fn fail(pool: &PgPool, id: Uuid, error: &str) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let failed = fail_in(&mut tx, id, error).await?;
    tx.commit().await?;
    Ok(failed)
}

async fn fail_in(tx: &mut PgConnection, id: Uuid, error: &str) -> Result<bool, StoreError> {
    sqlx::query(
        "UPDATE conversations c SET active_turn = NULL, lease_expires_at = NULL, \
             lease_taken_at = NULL \
         FROM continuation_outbox o \
         WHERE o.turn_id = $1 AND c.active_turn = o.id",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM continuation_outbox WHERE turn_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    async_results::abandon_open_groups(tx, id).await?;
    settle(tx, id, id, Err(error)).await
}

/// Fails the turns of up to `limit` jobs that used up `max_attempts`;
/// returns the failed turn ids.
pub async fn fail_exhausted(
    pool: &PgPool,
    max_attempts: i32,
    limit: i64,
) -> Result<Vec<Uuid>, StoreError> {
    let mut tx = pool.begin().await?;
    let exhausted = jobs::take_exhausted(&mut tx, max_attempts, limit).await?;
    let mut failed = Vec::new();
    for job in exhausted {
        let reason = format!(
            "the turn was given up after {max_attempts} attempts to run it{}",
            job.last_error
                .map(|e| format!("; the last one failed: {e}"))
                .unwrap_or_default()
        );
        if fail_in(&mut tx, job.turn_id, &reason).await? {
            failed.push(job.turn_id);
        }
    }
    tx.commit().await?;
    Ok(failed)
}

/// Fails every open turn of `agent` (it is being deleted); returns them.
pub async fn fail_turns_of_agent(
    pool: &PgPool,
    account: &AccountId,
    agent: AgentId,
    error: &str,
) -> Result<Vec<Uuid>, StoreError> {
    crate::error::retrying_deadlocks(|| fail_turns_of_agent_once(pool, account, agent, error)).await
}

async fn fail_turns_of_agent_once(
    pool: &PgPool,
    account: &AccountId,
    agent: AgentId,
    error: &str,
) -> Result<Vec<Uuid>, StoreError> {
    let mut tx = pool.begin().await?;
    let open: Vec<(Uuid,)> = sqlx::query_as(&format!(
        "SELECT id FROM async_turns WHERE account_id = $1 AND agent_id = $2 \
           AND status IN {TURNS_UNFINISHED} ORDER BY id FOR UPDATE"
    ))
    .bind(account.as_str())
    .bind(agent.as_uuid())
    .fetch_all(&mut *tx)
    .await?;
    let mut failed = Vec::new();
    for (id,) in open {
        if fail_in(&mut tx, id, error).await? {
            failed.push(id);
        }
    }
    tx.commit().await?;
    Ok(failed)
}

/// Fails up to `limit` turns unchanged for `grace` that have no way on: no
/// queued job and no open group (e.g. turns begun before this lifecycle).
/// Returns the failed turn ids.
pub async fn fail_stuck(
    pool: &PgPool,
    grace: Duration,
    limit: i64,
) -> Result<Vec<Uuid>, StoreError> {
    let mut tx = pool.begin().await?;
    let stuck: Vec<(Uuid,)> = sqlx::query_as(&format!(
        "SELECT t.id FROM async_turns t \
         WHERE t.status IN {TURNS_UNFINISHED} \
           AND t.updated_at < now() - make_interval(secs => $1) \
           AND NOT EXISTS (SELECT 1 FROM continuation_outbox o WHERE o.turn_id = t.id) \
           AND NOT EXISTS (SELECT 1 FROM dispatch_groups g \
                           WHERE g.turn_id = t.id AND g.continued_at IS NULL) \
         LIMIT $2 FOR UPDATE SKIP LOCKED"
    ))
    .bind(grace.as_secs_f64())
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    let mut failed = Vec::new();
    for (id,) in stuck {
        if fail_in(
            &mut tx,
            id,
            "the turn stopped making progress and was given up",
        )
        .await?
        {
            failed.push(id);
        }
    }
    tx.commit().await?;
    Ok(failed)
}

/// Reads one of `account`'s detached turns.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: Uuid,
) -> Result<AsyncTurnRecord, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, agent_id, conversation_id, status, messages, error, created_at, updated_at \
         FROM async_turns WHERE account_id = $1 AND id = $2",
    )
    .bind(account.as_str())
    .bind(id)
    .fetch_one(pool)
    .await?)
}

/// Reads a detached turn by id alone (for the job runner), with its account.
pub async fn get_any(pool: &PgPool, id: Uuid) -> Result<(AccountId, AsyncTurnRecord), StoreError> {
    let account: (String,) = sqlx::query_as("SELECT account_id FROM async_turns WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await?;
    let account = AccountId::parse(&account.0)
        .map_err(|err| StoreError::Other(sqlx::Error::Decode(err.to_string().into())))?;
    let record = get(pool, &account, id).await?;
    Ok((account, record))
}

/// The end user the turn `id` acts for, if known.
pub async fn end_user(pool: &PgPool, id: Uuid) -> Result<Option<String>, StoreError> {
    let (user,): (Option<String>,) =
        sqlx::query_as("SELECT end_user FROM async_turns WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(user)
}

/// Where to publish a NATS-requested turn's final result, if anywhere.
pub async fn reply_subject(pool: &PgPool, id: Uuid) -> Result<Option<String>, StoreError> {
    let (subject,): (Option<String>,) =
        sqlx::query_as("SELECT reply_subject FROM async_turns WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(subject)
}

/// The channel event a turn answers, if a channel started it.
pub async fn channel_event(pool: &PgPool, id: Uuid) -> Result<Option<Uuid>, StoreError> {
    let (event,): (Option<Uuid>,) =
        sqlx::query_as("SELECT channel_event FROM async_turns WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(event)
}

/// Whether `account` has a detached turn on `conversation_id` that has not
/// settled (running, or waiting for its detached calls).
pub async fn unsettled_on(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
) -> Result<bool, StoreError> {
    let (unsettled,): (bool,) = sqlx::query_as(&format!(
        "SELECT EXISTS (SELECT 1 FROM async_turns \
         WHERE account_id = $1 AND conversation_id = $2 AND status IN {TURNS_UNFINISHED})"
    ))
    .bind(account.as_str())
    .bind(conversation_id)
    .fetch_one(pool)
    .await?;
    Ok(unsettled)
}
