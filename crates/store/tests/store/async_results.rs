//! Detached calls and their dispatch groups: a pass recorded at once,
//! settling (completion, cancel, expiry, lost runners), heartbeats, token
//! rotation, and the fan-in that continues a group exactly once.

use std::time::Duration;

use serde_json::json;
use sqlx::{FromRow, PgPool};
use toolserver_domain::{CallStatus, ResultId};
use toolserver_store::async_results::{
    self, AsyncOutcome, Beat, HeartbeatAnswer, LostRunners, Settlement, SilentRunners,
    LEGACY_RUNNER_ERROR, SILENT_RUNNER_ERROR,
};
use toolserver_store::jobs::JobKind;
use toolserver_store::StoreError;
use uuid::Uuid;

use crate::support::{
    call, call_row, exec, group_row, jobs_of, race, register, register_n, start_turn, tenant,
    Tenant, Turn,
};

fn completed(n: i32) -> AsyncOutcome {
    AsyncOutcome::Completed(json!({"n": n}))
}

async fn settle(pool: &PgPool, id: ResultId, outcome: AsyncOutcome) -> Settlement {
    async_results::settle(pool, id, &outcome).await.unwrap()
}

/// The group of call `id`.
async fn group_of(pool: &PgPool, id: ResultId) -> Uuid {
    call_row(pool, id).await.group_id.unwrap()
}

/// The continue jobs of `turn`, as (group, account).
async fn continuations(pool: &PgPool, turn: &Turn) -> Vec<(Option<Uuid>, String)> {
    jobs_of(pool, turn.id)
        .await
        .into_iter()
        .filter(|job| job.kind == JobKind::Continue)
        .map(|job| (job.group_id, job.account_id))
        .collect()
}

/// A call's deadlines, in seconds from now, and what it keeps besides.
#[derive(Debug, FromRow)]
struct Deadlines {
    expires_in: f64,
    hard_expires_in: f64,
    alive_for: Option<f64>,
    heartbeat_at: bool,
    progress: Option<serde_json::Value>,
    safe_to_repeat: bool,
}

async fn deadlines(pool: &PgPool, id: ResultId) -> Deadlines {
    sqlx::query_as(
        "SELECT EXTRACT(EPOCH FROM expires_at - now())::float8 AS expires_in, \
                EXTRACT(EPOCH FROM hard_expires_at - now())::float8 AS hard_expires_in, \
                EXTRACT(EPOCH FROM alive_until - now())::float8 AS alive_for, \
                last_heartbeat_at IS NOT NULL AS heartbeat_at, progress, safe_to_repeat \
         FROM async_tool_results WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn about(seconds: f64, expected: f64) -> bool {
    (seconds - expected).abs() < 5.0
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_pass_is_recorded_at_once_in_a_group_born_sealed(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let mut beating = call(&tenant, "beating");
    beating.heartbeat_timeout = Some(Duration::from_secs(30));
    beating.safe_to_repeat = true;
    let ids = register(&pool, &tenant, &turn, &[call(&tenant, "plain"), beating]).await;

    let calls = async_results::of_job(&pool, turn.job.id).await.unwrap();
    assert_eq!(calls.iter().map(|c| c.id).collect::<Vec<_>>(), ids);
    assert!(calls
        .iter()
        .all(|c| c.status == CallStatus::Pending && c.settled_at.is_none()));
    assert_eq!(calls[0].tool_call_id, "plain");
    assert_eq!(calls[0].input, Some(json!({"call": "plain"})));
    let group = calls[0].group_id.unwrap();
    assert_eq!(calls[1].group_id, Some(group));
    assert_eq!(async_results::of_group(&pool, group).await.unwrap(), calls);
    let stored = group_row(&pool, group).await;
    assert!(stored.sealed && !stored.continued, "{stored:?}");
    assert_eq!(stored.remaining, 2);

    let plain = deadlines(&pool, ids[0]).await;
    assert!(about(plain.expires_in, 3600.0) && about(plain.hard_expires_in, 3600.0));
    assert!(about(plain.alive_for.unwrap(), 60.0) && !plain.safe_to_repeat);
    let beating = deadlines(&pool, ids[1]).await;
    assert!(about(beating.expires_in, 30.0), "{beating:?}");
    assert!(about(beating.hard_expires_in, 3600.0) && beating.safe_to_repeat);
    assert_eq!(
        async_results::token_hash(&pool, ids[0]).await.unwrap(),
        [1; 32]
    );

    let mut conn = pool.acquire().await.unwrap();
    assert!(async_results::job_opened_groups(&mut conn, turn.job.id)
        .await
        .unwrap());
    assert!(!async_results::job_opened_groups(&mut conn, Uuid::now_v7())
        .await
        .unwrap());
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_last_settlement_of_a_group_enqueues_its_one_continuation(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let ids = register_n(&pool, &tenant, &turn, 3).await;
    let group = group_of(&pool, ids[0]).await;

    for (n, id) in ids[..2].iter().enumerate() {
        let settled = settle(&pool, *id, completed(n as i32)).await;
        assert_eq!(settled, Settlement::Settled { continued: false });
    }
    let stored = group_row(&pool, group).await;
    assert_eq!(stored.remaining, 1);
    assert!(!stored.continued);
    assert!(continuations(&pool, &turn).await.is_empty());

    let last = settle(&pool, ids[2], AsyncOutcome::Failed("boom\0".into())).await;
    assert_eq!(last, Settlement::Settled { continued: true });
    let failed = call_row(&pool, ids[2]).await;
    assert_eq!(failed.status, CallStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("boom\\u0000"));
    assert!(failed.settled && failed.response.is_none());
    let first = call_row(&pool, ids[0]).await;
    assert_eq!(first.status, CallStatus::Completed);
    assert_eq!(first.response, Some(json!({"n": 0})));
    let stored = group_row(&pool, group).await;
    assert!(stored.remaining == 0 && stored.continued, "{stored:?}");
    assert_eq!(
        continuations(&pool, &turn).await,
        [(Some(group), "acct-a".to_owned())]
    );
    let queued = jobs_of(&pool, turn.id).await;
    let continuation = queued.iter().find(|j| j.kind == JobKind::Continue).unwrap();
    assert!(continuation.claim_token.is_none() && continuation.available);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_completion_again_is_a_replay_and_a_different_one_a_conflict(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let id = register_n(&pool, &tenant, &turn, 1).await[0];

    assert_eq!(
        settle(&pool, id, completed(1)).await,
        Settlement::Settled { continued: true }
    );
    assert_eq!(settle(&pool, id, completed(1)).await, Settlement::Replay);
    assert_eq!(
        settle(&pool, id, completed(2)).await,
        Settlement::Conflict(CallStatus::Completed)
    );
    assert_eq!(
        settle(&pool, id, AsyncOutcome::Failed("late".into())).await,
        Settlement::Conflict(CallStatus::Completed)
    );
    let stored = call_row(&pool, id).await;
    assert_eq!(stored.response, Some(json!({"n": 1})));
    assert!(stored.error.is_none());
    assert_eq!(continuations(&pool, &turn).await.len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_past_its_deadline_is_expired_by_the_reaper_not_settled(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let ids = register_n(&pool, &tenant, &turn, 3).await;
    let group = group_of(&pool, ids[0]).await;
    for id in &ids[..2] {
        let past = "UPDATE async_tool_results SET expires_at = now() - interval '1 second' \
                    WHERE id = $1";
        exec(&pool, past, *id).await;
    }

    assert_eq!(
        settle(&pool, ids[0], completed(1)).await,
        Settlement::Expired
    );
    let beat = async_results::heartbeat(&pool, ids[0], &Beat::Liveness, Duration::from_secs(60));
    assert_eq!(beat.await.unwrap(), HeartbeatAnswer::Expired);
    let untouched = call_row(&pool, ids[0]).await;
    assert_eq!(untouched.status, CallStatus::Pending);
    assert!(!untouched.settled && untouched.response.is_none());

    assert_eq!(async_results::expire_due(&pool, 1).await.unwrap(), 1);
    assert_eq!(async_results::expire_due(&pool, 10).await.unwrap(), 1);
    assert_eq!(async_results::expire_due(&pool, 10).await.unwrap(), 0);
    for id in &ids[..2] {
        let expired = call_row(&pool, *id).await;
        assert_eq!(expired.status, CallStatus::Expired);
        assert!(expired.settled);
        assert_eq!(
            expired.error.as_deref(),
            Some("the call did not complete before it expired")
        );
    }
    assert_eq!(call_row(&pool, ids[2]).await.status, CallStatus::Pending);
    assert_eq!(group_row(&pool, group).await.remaining, 1);
    assert!(continuations(&pool, &turn).await.is_empty());
    assert_eq!(
        settle(&pool, ids[0], completed(1)).await,
        Settlement::Expired
    );

    assert_eq!(
        settle(&pool, ids[2], completed(2)).await,
        Settlement::Settled { continued: true }
    );
    assert_eq!(continuations(&pool, &turn).await.len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn heartbeats_move_the_deadline_up_to_the_hard_cap(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let mut beating = call(&tenant, "beating");
    beating.ttl = Duration::from_secs(600);
    beating.heartbeat_timeout = Some(Duration::from_secs(60));
    let id = register(&pool, &tenant, &turn, &[beating]).await[0];
    let soon = "UPDATE async_tool_results SET expires_at = now() + interval '5 seconds', \
                alive_until = now() + interval '5 seconds' WHERE id = $1";
    exec(&pool, soon, id).await;
    let liveness = Duration::from_secs(120);

    let progress = Beat::Tool(Some(r#"{"done": 1}"#.into()));
    let answer = async_results::heartbeat(&pool, id, &progress, liveness)
        .await
        .unwrap();
    let stored = deadlines(&pool, id).await;
    assert!(about(stored.expires_in, 60.0), "{stored:?}");
    assert!(about(stored.alive_for.unwrap(), 120.0) && stored.heartbeat_at);
    assert_eq!(stored.progress, Some(json!({"done": 1})));
    let record = async_results::get(&pool, &tenant.account, id)
        .await
        .unwrap();
    assert_eq!(answer, HeartbeatAnswer::Pending(record.expires_at));

    exec(&pool, soon, id).await;
    let answer = async_results::heartbeat(&pool, id, &Beat::Liveness, liveness)
        .await
        .unwrap();
    let stored = deadlines(&pool, id).await;
    assert!(
        about(stored.expires_in, 5.0),
        "a ping moved the deadline: {stored:?}"
    );
    assert!(about(stored.alive_for.unwrap(), 120.0));
    assert_eq!(stored.progress, Some(json!({"done": 1})));
    let record = async_results::get(&pool, &tenant.account, id)
        .await
        .unwrap();
    assert_eq!(answer, HeartbeatAnswer::Pending(record.expires_at));

    let capped = "UPDATE async_tool_results SET hard_expires_at = now() + interval '10 seconds' \
                  WHERE id = $1";
    exec(&pool, capped, id).await;
    async_results::heartbeat(&pool, id, &Beat::Tool(None), liveness)
        .await
        .unwrap();
    let stored = deadlines(&pool, id).await;
    assert!(about(stored.expires_in, 10.0), "{stored:?}");
    assert_eq!(stored.progress, Some(json!({"done": 1})));

    settle(&pool, id, completed(1)).await;
    let answer = async_results::heartbeat(&pool, id, &Beat::Tool(None), liveness);
    assert_eq!(
        answer.await.unwrap(),
        HeartbeatAnswer::Settled(CallStatus::Completed)
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn only_the_owning_account_reads_or_cancels_a_call(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let turn = start_turn(&pool, &owner).await;
    let ids = register_n(&pool, &owner, &turn, 2).await;
    let group = group_of(&pool, ids[0]).await;

    assert!(!async_results::cancel(&pool, &other.account, ids[0])
        .await
        .unwrap());
    assert_eq!(call_row(&pool, ids[0]).await.status, CallStatus::Pending);
    assert!(matches!(
        async_results::get(&pool, &other.account, ids[0]).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        async_results::tool_of(&pool, &other.account, ids[0]).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        async_results::tool_of(&pool, &owner.account, ids[0])
            .await
            .unwrap(),
        Some(owner.tool)
    );

    assert!(async_results::cancel(&pool, &owner.account, ids[0])
        .await
        .unwrap());
    let cancelled = call_row(&pool, ids[0]).await;
    assert_eq!(cancelled.status, CallStatus::Cancelled);
    assert!(cancelled.settled);
    assert_eq!(
        cancelled.error.as_deref(),
        Some("stopped before it finished")
    );
    assert!(!async_results::cancel(&pool, &owner.account, ids[0])
        .await
        .unwrap());
    assert_eq!(
        settle(&pool, ids[0], completed(1)).await,
        Settlement::Conflict(CallStatus::Cancelled)
    );
    assert_eq!(group_row(&pool, group).await.remaining, 1);
    assert!(continuations(&pool, &turn).await.is_empty());

    assert!(async_results::cancel(&pool, &owner.account, ids[1])
        .await
        .unwrap());
    assert!(group_row(&pool, group).await.continued);
    assert_eq!(continuations(&pool, &turn).await.len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_silent_runner_is_relaunched_when_safe_and_failed_otherwise(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let mut safe = call(&tenant, "safe");
    safe.safe_to_repeat = true;
    let calls = [call(&tenant, "unsafe"), safe, call(&tenant, "heard")];
    let ids = register(&pool, &tenant, &turn, &calls).await;
    let silent = "UPDATE async_tool_results SET alive_until = now() - interval '1 second' \
                  WHERE id = $1";
    exec(&pool, silent, ids[0]).await;
    exec(&pool, silent, ids[1]).await;
    let liveness = Duration::from_secs(60);

    let relaunched =
        async_results::relaunch_lost_runners(&pool, LostRunners::Silent, 3, liveness, 10);
    assert_eq!(relaunched.await.unwrap(), 1);
    let again = call_row(&pool, ids[1]).await;
    assert_eq!((again.status, again.launches), (CallStatus::Pending, 2));
    assert!(about(
        deadlines(&pool, ids[1]).await.alive_for.unwrap(),
        60.0
    ));
    let relaunches: Vec<_> = jobs_of(&pool, turn.id)
        .await
        .into_iter()
        .filter(|job| job.kind == JobKind::Relaunch)
        .map(|job| (job.call_id, job.group_id, job.account_id))
        .collect();
    assert_eq!(relaunches, [(Some(ids[1]), None, "acct-a".to_owned())]);

    let failed = async_results::fail_lost_runners(&pool, LostRunners::Silent, 3, 10);
    assert_eq!(failed.await.unwrap(), 1);
    let lost = call_row(&pool, ids[0]).await;
    assert_eq!(lost.status, CallStatus::Failed);
    assert_eq!(lost.error.as_deref(), Some(SILENT_RUNNER_ERROR));
    assert_eq!(call_row(&pool, ids[2]).await.status, CallStatus::Pending);

    let spent = "UPDATE async_tool_results SET alive_until = now() - interval '1 second', \
                 launches = 3 WHERE id = $1";
    exec(&pool, spent, ids[1]).await;
    let relaunched =
        async_results::relaunch_lost_runners(&pool, LostRunners::Silent, 3, liveness, 10);
    assert_eq!(relaunched.await.unwrap(), 0);
    let failed = async_results::fail_lost_runners(&pool, LostRunners::Silent, 3, 10);
    assert_eq!(failed.await.unwrap(), 1);
    assert_eq!(call_row(&pool, ids[1]).await.status, CallStatus::Failed);
    assert_eq!(call_row(&pool, ids[2]).await.status, CallStatus::Pending);
}

#[sqlx::test(migrations = "../../migrations")]
async fn silence_is_judged_on_the_clock_of_when_the_process_was_known_to_hear(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let mut safe = call(&tenant, "safe");
    safe.safe_to_repeat = true;
    let calls = [call(&tenant, "unsafe"), safe, call(&tenant, "heard")];
    let ids = register(&pool, &tenant, &turn, &calls).await;
    let silent = "UPDATE async_tool_results SET alive_until = now() - interval '1 second' \
                  WHERE id = $1";
    exec(&pool, silent, ids[0]).await;
    exec(&pool, silent, ids[1]).await;
    let soon = "UPDATE async_tool_results SET alive_until = now() + interval '1 second' \
                WHERE id = $1";
    exec(&pool, soon, ids[2]).await;
    let liveness = Duration::from_secs(60);

    let deaf = async_results::settle_silent_runners(&pool, || false, 3, liveness, 10);
    assert_eq!(
        deaf.await.unwrap(),
        None,
        "a process that could not hear judges nothing"
    );
    for id in &ids {
        assert_eq!(call_row(&pool, *id).await.status, CallStatus::Pending);
    }

    // The process stalls right after it answered that it heard: the third
    // call's runner goes unheard past its deadline meanwhile, and is still
    // not judged silent, since the judgement is as of before the stall.
    let stalls = || {
        std::thread::sleep(Duration::from_millis(1500));
        true
    };
    let judged = async_results::settle_silent_runners(&pool, stalls, 3, liveness, 10);
    let expected = SilentRunners {
        relaunched: 1,
        failed: 1,
    };
    assert_eq!(judged.await.unwrap(), Some(expected));
    assert_eq!(call_row(&pool, ids[0]).await.status, CallStatus::Failed);
    assert_eq!(call_row(&pool, ids[1]).await.launches, 2);
    assert_eq!(call_row(&pool, ids[2]).await.status, CallStatus::Pending);

    let later = async_results::settle_silent_runners(&pool, || true, 3, liveness, 10);
    let expected = SilentRunners {
        relaunched: 0,
        failed: 1,
    };
    assert_eq!(later.await.unwrap(), Some(expected));
    let unheard = call_row(&pool, ids[2]).await;
    assert_eq!(unheard.error.as_deref(), Some(SILENT_RUNNER_ERROR));
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_exited_runner_loses_only_the_launch_it_ran(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let mut safe = call(&tenant, "safe");
    safe.safe_to_repeat = true;
    let calls = [call(&tenant, "unsafe"), safe, call(&tenant, "relaunched")];
    let ids = register(&pool, &tenant, &turn, &calls).await;
    let cause = "killed by signal 9 (SIGKILL)";

    let exited = LostRunners::Exited {
        calls: &[(ids[0], 1), (ids[2], 2)],
        cause,
    };
    assert_eq!(
        async_results::fail_lost_runners(&pool, exited, 3, 10)
            .await
            .unwrap(),
        1
    );
    let lost = call_row(&pool, ids[0]).await;
    assert_eq!(lost.status, CallStatus::Failed);
    assert!(lost.error.unwrap().contains(cause));
    assert_eq!(call_row(&pool, ids[2]).await.status, CallStatus::Pending);

    let exited = LostRunners::Exited {
        calls: &[(ids[1], 1)],
        cause,
    };
    let liveness = Duration::from_secs(60);
    let relaunched = async_results::relaunch_lost_runners(&pool, exited, 3, liveness, 10);
    assert_eq!(relaunched.await.unwrap(), 1);
    assert_eq!(call_row(&pool, ids[1]).await.launches, 2);
    let relaunched = async_results::relaunch_lost_runners(&pool, exited, 3, liveness, 10);
    assert_eq!(relaunched.await.unwrap(), 0);
    assert_eq!(
        async_results::fail_lost_runners(&pool, exited, 3, 10)
            .await
            .unwrap(),
        0
    );
    assert_eq!(call_row(&pool, ids[1]).await.status, CallStatus::Pending);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_runner_from_before_the_upgrade_fails_once_its_liveness_passed(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let ids = register_n(&pool, &tenant, &turn, 2).await;
    let long_ago = "UPDATE async_tool_results SET alive_until = NULL, \
                    legacy_runner_since = now() - interval '2 minutes' WHERE id = $1";
    exec(&pool, long_ago, ids[0]).await;
    let just_now = "UPDATE async_tool_results SET alive_until = NULL, \
                    legacy_runner_since = now() WHERE id = $1";
    exec(&pool, just_now, ids[1]).await;

    let judged =
        async_results::settle_silent_runners(&pool, || true, 3, Duration::from_secs(60), 10);
    let expected = SilentRunners {
        relaunched: 0,
        failed: 1,
    };
    assert_eq!(judged.await.unwrap(), Some(expected));
    let lost = call_row(&pool, ids[0]).await;
    assert_eq!(lost.status, CallStatus::Failed);
    assert_eq!(lost.error.as_deref(), Some(LEGACY_RUNNER_ERROR));
    assert_eq!(call_row(&pool, ids[1]).await.status, CallStatus::Pending);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_pending_call_gets_a_new_token_and_a_settled_one_keeps_its_own(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let id = register_n(&pool, &tenant, &turn, 1).await[0];

    let rotated = async_results::rotate_token(&pool, id, [2; 32]).await;
    assert_eq!(rotated.unwrap(), Some(1));
    assert_eq!(async_results::token_hash(&pool, id).await.unwrap(), [2; 32]);

    settle(&pool, id, completed(1)).await;
    let rotated = async_results::rotate_token(&pool, id, [3; 32]).await;
    assert_eq!(rotated.unwrap(), None);
    assert_eq!(async_results::token_hash(&pool, id).await.unwrap(), [2; 32]);
}

/// Records an unsealed group of `turn` made by the job `job`, `age` old,
/// with `remaining` calls out.
async fn unsealed_group(pool: &PgPool, tenant: &Tenant, turn: &Turn, job: Uuid, age: i32) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO dispatch_groups (id, account_id, parent, turn_id, job_id, remaining, \
                                      created_at) \
         VALUES ($1, $2, $3::text, $3, $4, 0, now() - make_interval(secs => $5))",
    )
    .bind(id)
    .bind(tenant.account.as_str())
    .bind(turn.id)
    .bind(job)
    .bind(f64::from(age))
    .execute(pool)
    .await
    .unwrap();
    id
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_group_its_job_left_open_is_sealed_and_continues(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let orphan = unsealed_group(&pool, &tenant, &turn, Uuid::now_v7(), 3600).await;
    let young = unsealed_group(&pool, &tenant, &turn, Uuid::now_v7(), 0).await;
    let running = unsealed_group(&pool, &tenant, &turn, turn.job.id, 3600).await;

    let sealed = async_results::seal_orphaned_groups(&pool, Duration::from_secs(60), 10);
    assert_eq!(sealed.await.unwrap(), 1);
    let stored = group_row(&pool, orphan).await;
    assert!(stored.sealed && stored.continued, "{stored:?}");
    assert_eq!(
        continuations(&pool, &turn).await,
        [(Some(orphan), "acct-a".to_owned())]
    );
    for open in [young, running] {
        let stored = group_row(&pool, open).await;
        assert!(!stored.sealed && !stored.continued, "{stored:?}");
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn two_last_settlements_at_once_continue_the_group_once(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let ids = register_n(&pool, &tenant, &turn, 2).await;
    let group = group_of(&pool, ids[0]).await;

    let lock = "SELECT 1 FROM dispatch_groups WHERE id = $1 FOR UPDATE";
    let (a, b) = race(
        &pool,
        lock,
        group,
        settle(&pool, ids[0], completed(0)),
        settle(&pool, ids[1], completed(1)),
    )
    .await;
    let continued: Vec<bool> = [a, b]
        .into_iter()
        .map(|s| match s {
            Settlement::Settled { continued } => continued,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(continued.iter().filter(|c| **c).count(), 1, "{continued:?}");
    let stored = group_row(&pool, group).await;
    assert!(stored.remaining == 0 && stored.continued, "{stored:?}");
    assert_eq!(continuations(&pool, &turn).await.len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn two_completions_of_one_call_at_once_settle_it_once(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let id = register_n(&pool, &tenant, &turn, 1).await[0];

    let lock = "SELECT 1 FROM async_tool_results WHERE id = $1 FOR UPDATE";
    let (a, b) = race(
        &pool,
        lock,
        id,
        settle(&pool, id, completed(1)),
        settle(&pool, id, completed(2)),
    )
    .await;
    let won = match (&a, &b) {
        (Settlement::Settled { continued: true }, Settlement::Conflict(CallStatus::Completed)) => 1,
        (Settlement::Conflict(CallStatus::Completed), Settlement::Settled { continued: true }) => 2,
        other => panic!("{other:?}"),
    };
    assert_eq!(call_row(&pool, id).await.response, Some(json!({"n": won})));
    assert_eq!(continuations(&pool, &turn).await.len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_cancel_and_a_completion_at_once_settle_the_call_once(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let id = register_n(&pool, &tenant, &turn, 1).await[0];

    let lock = "SELECT 1 FROM async_tool_results WHERE id = $1 FOR UPDATE";
    let (cancelled, completion) = race(
        &pool,
        lock,
        id,
        async_results::cancel(&pool, &tenant.account, id),
        settle(&pool, id, completed(1)),
    )
    .await;
    let status = call_row(&pool, id).await.status;
    match (cancelled.unwrap(), completion) {
        (true, Settlement::Conflict(CallStatus::Cancelled)) => {
            assert_eq!(status, CallStatus::Cancelled)
        }
        (false, Settlement::Settled { continued: true }) => {
            assert_eq!(status, CallStatus::Completed)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(continuations(&pool, &turn).await.len(), 1);
}
