//! Detached turns: created running with a claimed start job, waiting while
//! a group of theirs is open, running again under the continuation's claim,
//! settled once (completed or failed), and failed by the reapers.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_domain::{AccountId, ResultId, TurnStatus};
use toolserver_store::async_results::{self, AsyncOutcome, Settlement};
use toolserver_store::async_turns::{self, Committed, NewTurn, RunCommit, RunEnd};
use toolserver_store::conversations::{self, Begun, Known, LeaseTerms};
use toolserver_store::jobs::{self, Job, JobKind};
use toolserver_store::StoreError;
use uuid::Uuid;

use crate::support::{
    call_row, conversation_holder, exec, group_row, jobs_of, lease, live_process, race, register_n,
    start_turn, start_turn_on, tenant, terms, turn_row, Tenant,
};

/// Commits `job`'s run of the tenant's conversation `conversation`.
async fn commit(
    pool: &PgPool,
    tenant: &Tenant,
    conversation: &str,
    job: &Job,
    end: RunEnd<'_>,
) -> Committed {
    let commit = RunCommit {
        account: &tenant.account,
        conversation_id: conversation,
        job,
        end,
        reply: None,
    };
    async_turns::commit_run(pool, commit).await.unwrap()
}

/// The stored messages of the tenant's conversation `id`.
async fn conversation_messages(pool: &PgPool, tenant: &Tenant, id: &str) -> Vec<Value> {
    conversations::get(pool, &tenant.account, id)
        .await
        .unwrap()
        .messages
}

/// Takes the conversation's lease for `job`, as a job's run does first.
async fn take_conversation(pool: &PgPool, tenant: &Tenant, job: &Job, process: Uuid) {
    let lease = LeaseTerms {
        holder: job.id,
        process,
        lease: Duration::from_secs(60),
    };
    let begun = conversations::begin_turn(
        &mut pool.acquire().await.unwrap(),
        &tenant.account,
        &tenant.conversation,
        tenant.agent,
        lease,
        Known::default(),
    )
    .await
    .unwrap();
    assert!(matches!(begun, Begun::Held { .. }), "{begun:?}");
}

/// Settles every one of `ids` as completed.
async fn complete_all(pool: &PgPool, ids: &[ResultId]) {
    for id in ids {
        let outcome = AsyncOutcome::Completed(json!({"ok": true}));
        async_results::settle(pool, *id, &outcome).await.unwrap();
    }
}

fn messages(text: &str) -> Value {
    json!([{"role": "assistant", "parts": [{"type": "text", "text": text}]}])
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_new_turn_runs_under_its_start_job_which_holds_the_conversation(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let turn = start_turn(&pool, &owner).await;

    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Running);
    assert!(stored.messages.is_none() && stored.settle_event_id.is_none());
    let queued = jobs_of(&pool, turn.id).await;
    assert_eq!(queued.len(), 1);
    let start = &queued[0];
    assert_eq!(
        (start.id, start.kind, start.attempts),
        (turn.job.id, JobKind::Start, 1)
    );
    assert_eq!(start.claim_token, Some(turn.job.claim_token));
    assert_eq!(start.claimed_by, Some(turn.process));
    assert!(start.claimed);
    assert_eq!(
        conversation_holder(&pool, &owner, "conv-1").await,
        Some(turn.job.id)
    );

    let record = async_turns::get(&pool, &owner.account, turn.id)
        .await
        .unwrap();
    assert_eq!(record.status, TurnStatus::Running);
    assert_eq!(record.agent_id, Some(owner.agent.as_uuid()));
    assert_eq!(record.conversation_id, "conv-1");
    let (account, any) = async_turns::get_any(&pool, turn.id).await.unwrap();
    assert_eq!((account, any), (owner.account.clone(), record));
    assert_eq!(
        async_turns::reply_subject(&pool, turn.id).await.unwrap(),
        Some("reply.subject".to_owned())
    );
    assert!(matches!(
        async_turns::get(&pool, &other.account, turn.id).await,
        Err(StoreError::NotFound)
    ));
    assert!(async_turns::unsettled_on(&pool, &owner.account, "conv-1")
        .await
        .unwrap());
    assert!(!async_turns::unsettled_on(&pool, &other.account, "conv-1")
        .await
        .unwrap());
    assert!(!async_turns::unsettled_on(&pool, &owner.account, "conv-2")
        .await
        .unwrap());
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_turn_needs_the_lease_its_request_took(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let process = live_process(&pool).await;
    let holder = lease(&pool, &tenant, "conv-1", process).await;

    let turn = NewTurn {
        agent: tenant.agent,
        conversation_id: "conv-1",
        lease_holder: Uuid::now_v7(),
        reply_subject: None,
        channel_event: None,
        end_user: None,
        claim: terms(process),
    };
    let created = async_turns::create(&pool, &tenant.account, turn).await;
    assert!(matches!(created, Err(StoreError::NotFound)), "{created:?}");
    let (turns, jobs): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM async_turns), (SELECT count(*) FROM continuation_outbox)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((turns, jobs), (0, 0));
    assert_eq!(
        conversation_holder(&pool, &tenant, "conv-1").await,
        Some(holder)
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_run_with_nothing_open_completes_the_turn_once(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let done = messages("done");

    let committed = commit(&pool, &tenant, "conv-1", &turn.job, RunEnd::Finished(&done)).await;
    assert_eq!(committed, Committed::Turn(TurnStatus::Completed));
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Completed);
    assert_eq!(stored.messages, Some(done.clone()));
    assert_eq!(stored.settle_event_id, Some(turn.job.id));
    assert!(stored.error.is_none());
    assert!(jobs_of(&pool, turn.id).await.is_empty());
    assert_eq!(conversation_holder(&pool, &tenant, "conv-1").await, None);
    assert_eq!(
        Value::Array(conversation_messages(&pool, &tenant, "conv-1").await),
        done
    );
    assert!(!async_turns::unsettled_on(&pool, &tenant.account, "conv-1")
        .await
        .unwrap());

    let again = commit(&pool, &tenant, "conv-1", &turn.job, RunEnd::Finished(&done)).await;
    assert_eq!(again, Committed::LostClaim);
    assert!(!async_turns::fail(&pool, turn.id, "too late").await.unwrap());
    async_turns::mark_running(&pool, turn.id).await.unwrap();
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Completed);
    assert!(stored.error.is_none());
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_turn_waits_for_its_calls_and_runs_again_under_its_continuation(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let ids = register_n(&pool, &tenant, &turn, 2).await;
    let group = call_row(&pool, ids[0]).await.group_id.unwrap();
    let first_pass = messages("calling");

    let committed = commit(
        &pool,
        &tenant,
        "conv-1",
        &turn.job,
        RunEnd::Finished(&first_pass),
    );
    assert_eq!(committed.await, Committed::Turn(TurnStatus::Waiting));
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Waiting);
    assert!(stored.messages.is_none() && stored.settle_event_id.is_none());
    assert_eq!(conversation_holder(&pool, &tenant, "conv-1").await, None);
    assert_eq!(
        Value::Array(conversation_messages(&pool, &tenant, "conv-1").await),
        first_pass
    );
    assert!(async_turns::unsettled_on(&pool, &tenant.account, "conv-1")
        .await
        .unwrap());
    let claim_terms = terms(turn.process);
    assert_eq!(jobs::claim(&pool, &claim_terms, 5).await.unwrap(), None);

    complete_all(&pool, &ids).await;
    let continuation = jobs::claim(&pool, &claim_terms, 5).await.unwrap().unwrap();
    assert_eq!(continuation.kind, JobKind::Continue);
    assert_eq!(continuation.group_id, Some(group));
    assert_eq!((continuation.turn_id, continuation.attempts), (turn.id, 1));
    async_turns::mark_running(&pool, turn.id).await.unwrap();
    assert_eq!(turn_row(&pool, turn.id).await.status, TurnStatus::Running);

    take_conversation(&pool, &tenant, &continuation, turn.process).await;
    let answered = messages("answered");
    let committed = commit(
        &pool,
        &tenant,
        "conv-1",
        &continuation,
        RunEnd::Finished(&answered),
    );
    assert_eq!(committed.await, Committed::Turn(TurnStatus::Completed));
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Completed);
    assert_eq!(stored.messages, Some(answered));
    assert_eq!(stored.settle_event_id, Some(continuation.id));
    assert!(jobs_of(&pool, turn.id).await.is_empty());
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_run_that_lost_its_claim_or_its_conversation_writes_nothing(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let lapsed = "UPDATE continuation_outbox SET claim_expires_at = now() - interval '1 second' \
                  WHERE id = $1";
    exec(&pool, lapsed, turn.job.id).await;
    let successor = live_process(&pool).await;
    let taken = jobs::claim(&pool, &terms(successor), 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.id, taken.attempts), (turn.job.id, 2));
    assert_ne!(taken.claim_token, turn.job.claim_token);

    let unsaved = messages("unsaved");
    let stale = commit(
        &pool,
        &tenant,
        "conv-1",
        &turn.job,
        RunEnd::Finished(&unsaved),
    );
    assert_eq!(stale.await, Committed::LostClaim);
    assert_eq!(turn_row(&pool, turn.id).await.status, TurnStatus::Running);
    assert!(conversation_messages(&pool, &tenant, "conv-1")
        .await
        .is_empty());
    let queued = jobs_of(&pool, turn.id).await;
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].claim_token, Some(taken.claim_token));

    let elsewhere = "UPDATE conversations SET active_turn = $1";
    exec(&pool, elsewhere, Uuid::now_v7()).await;
    let lost = commit(&pool, &tenant, "conv-1", &taken, RunEnd::Finished(&unsaved));
    assert_eq!(lost.await, Committed::LostConversation);
    assert_eq!(turn_row(&pool, turn.id).await.status, TurnStatus::Running);
    assert!(conversation_messages(&pool, &tenant, "conv-1")
        .await
        .is_empty());
    assert_eq!(
        jobs_of(&pool, turn.id).await.len(),
        1,
        "the job was removed"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_failed_run_fails_the_turn_and_abandons_its_open_groups(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let ids = register_n(&pool, &tenant, &turn, 1).await;
    let group = call_row(&pool, ids[0]).await.group_id.unwrap();
    let so_far = messages("so far");

    let end = RunEnd::Failed(&so_far, "the model refused\0");
    let committed = commit(&pool, &tenant, "conv-1", &turn.job, end).await;
    assert_eq!(committed, Committed::Turn(TurnStatus::Failed));
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Failed);
    assert_eq!(stored.error.as_deref(), Some("the model refused\\u0000"));
    assert_eq!(stored.settle_event_id, Some(turn.job.id));
    assert!(stored.messages.is_none());
    assert_eq!(
        Value::Array(conversation_messages(&pool, &tenant, "conv-1").await),
        so_far
    );
    let abandoned = group_row(&pool, group).await;
    assert!(abandoned.sealed && abandoned.continued, "{abandoned:?}");

    let outcome = AsyncOutcome::Completed(json!(1));
    let late = async_results::settle(&pool, ids[0], &outcome).await;
    assert_eq!(late.unwrap(), Settlement::Settled { continued: false });
    assert!(jobs_of(&pool, turn.id).await.is_empty());
}

#[sqlx::test(migrations = "../../migrations")]
async fn failing_a_turn_frees_what_its_jobs_hold_once(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let ids = register_n(&pool, &tenant, &turn, 1).await;
    let group = call_row(&pool, ids[0]).await.group_id.unwrap();

    assert!(async_turns::fail(&pool, turn.id, "the agent is gone")
        .await
        .unwrap());
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Failed);
    assert_eq!(stored.error.as_deref(), Some("the agent is gone"));
    assert_eq!(stored.settle_event_id, Some(turn.id));
    assert!(jobs_of(&pool, turn.id).await.is_empty());
    assert_eq!(conversation_holder(&pool, &tenant, "conv-1").await, None);
    assert!(group_row(&pool, group).await.continued);

    assert!(!async_turns::fail(&pool, turn.id, "again").await.unwrap());
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.error.as_deref(), Some("the agent is gone"));
}

#[sqlx::test(migrations = "../../migrations")]
async fn two_failures_at_once_settle_the_turn_once(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;

    let lock = "SELECT 1 FROM async_turns WHERE id = $1 FOR UPDATE";
    let (a, b) = race(
        &pool,
        lock,
        turn.id,
        async_turns::fail(&pool, turn.id, "first"),
        async_turns::fail(&pool, turn.id, "second"),
    )
    .await;
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a ^ b, "both or neither failed the turn: {a} {b}");
    let stored = turn_row(&pool, turn.id).await;
    assert_eq!(stored.status, TurnStatus::Failed);
    let winner = if a { "first" } else { "second" };
    assert_eq!(stored.error.as_deref(), Some(winner));
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_turn_whose_job_used_up_its_attempts_fails_with_the_last_error(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let spent = start_turn(&pool, &tenant).await;
    let held = start_turn_on(&pool, &tenant, "conv-2").await;
    jobs::retry_later(&pool, &spent.job, Duration::ZERO, "the runner crashed")
        .await
        .unwrap();

    let failed = async_turns::fail_exhausted(&pool, 1, 10).await.unwrap();
    assert_eq!(failed, [spent.id]);
    let stored = turn_row(&pool, spent.id).await;
    assert_eq!(stored.status, TurnStatus::Failed);
    let error = stored.error.unwrap();
    assert!(error.contains("after 1 attempts"), "{error}");
    assert!(error.contains("the runner crashed"), "{error}");
    assert!(jobs_of(&pool, spent.id).await.is_empty());
    assert_eq!(turn_row(&pool, held.id).await.status, TurnStatus::Running);
    assert_eq!(jobs_of(&pool, held.id).await.len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn deleting_an_agent_fails_only_its_unfinished_turns(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let open = start_turn(&pool, &owner).await;
    let done = start_turn_on(&pool, &owner, "conv-2").await;
    commit(
        &pool,
        &owner,
        "conv-2",
        &done.job,
        RunEnd::Finished(&messages("ok")),
    )
    .await;
    let others = start_turn(&pool, &other).await;

    let wrong_account = AccountId::parse("acct-b").unwrap();
    let failed = async_turns::fail_turns_of_agent(&pool, &wrong_account, owner.agent, "gone");
    assert!(failed.await.unwrap().is_empty());
    assert_eq!(turn_row(&pool, open.id).await.status, TurnStatus::Running);

    let failed = async_turns::fail_turns_of_agent(&pool, &owner.account, owner.agent, "gone");
    assert_eq!(failed.await.unwrap(), [open.id]);
    let stored = turn_row(&pool, open.id).await;
    assert_eq!(stored.status, TurnStatus::Failed);
    assert_eq!(stored.error.as_deref(), Some("gone"));
    assert_eq!(turn_row(&pool, done.id).await.status, TurnStatus::Completed);
    assert_eq!(turn_row(&pool, others.id).await.status, TurnStatus::Running);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_turn_with_no_way_on_is_failed_after_the_grace(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let stuck = start_turn_on(&pool, &tenant, "conv-1").await;
    let with_job = start_turn_on(&pool, &tenant, "conv-2").await;
    let recent = start_turn_on(&pool, &tenant, "conv-3").await;
    let waiting = start_turn_on(&pool, &tenant, "conv-4").await;
    register_n(&pool, &tenant, &waiting, 1).await;
    let committed = commit(&pool, &tenant, "conv-4", &waiting.job, RunEnd::Skipped).await;
    assert_eq!(committed, Committed::Turn(TurnStatus::Waiting));
    for turn in [&stuck, &recent] {
        exec(
            &pool,
            "DELETE FROM continuation_outbox WHERE turn_id = $1",
            turn.id,
        )
        .await;
    }
    for turn in [&stuck, &with_job, &waiting] {
        let old = "UPDATE async_turns SET updated_at = now() - interval '1 hour' WHERE id = $1";
        exec(&pool, old, turn.id).await;
    }

    let failed = async_turns::fail_stuck(&pool, Duration::from_secs(60), 10);
    assert_eq!(failed.await.unwrap(), [stuck.id]);
    let stored = turn_row(&pool, stuck.id).await;
    assert_eq!(stored.status, TurnStatus::Failed);
    assert_eq!(
        stored.error.as_deref(),
        Some("the turn stopped making progress and was given up")
    );
    assert_eq!(
        turn_row(&pool, with_job.id).await.status,
        TurnStatus::Running
    );
    assert_eq!(turn_row(&pool, recent.id).await.status, TurnStatus::Running);
    assert_eq!(
        turn_row(&pool, waiting.id).await.status,
        TurnStatus::Waiting
    );
}
