//! Groups of detached calls and the jobs that continue them: a turn that
//! detaches twice, a continuation whose results are stored already, a
//! deleted agent or a job out of attempts failing its turn, a job whose
//! conversation is busy, and a group left unsealed (defects 1 to 5).

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::TurnStatus;
use toolserver_store::async_turns;
use toolserver_store::jobs;
use toolserver_testsupport::Reply;
use uuid::Uuid;

use crate::app::{spawn_live_app, TestApp};
use crate::completion::turn_fixture;
use crate::detached::{start_async, wait_for_status};
use crate::support::*;

use super::{account, async_agent, text_of, DELAYED};

async fn turn_row(pool: &PgPool, id: &str) -> async_turns::AsyncTurnRecord {
    async_turns::get(pool, &account(), Uuid::parse_str(id).unwrap())
        .await
        .unwrap()
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect1_a_turn_that_detaches_in_two_passes_completes_after_both_groups(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (_, agent) = async_agent(
        &app,
        ("job", DELAYED),
        "two-groups",
        json!({}),
        vec![
            Reply::tool_call("c1", "job", json!({"name": "a", "ms": 50})),
            Reply::tool_call("c2", "job", json!({"name": "b", "ms": 2500})),
            Reply::text("Both started."),
            Reply::error(500, "step 3 is the injected result of a"),
            Reply::text("A arrived."),
            Reply::error(500, "step 5 is the injected result of b"),
            Reply::text("B arrived."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-two-groups", "start both").await;
    // After the first group's continuation the turn still waits for b.
    let mut waited_after_a = false;
    for _ in 0..200 {
        let row = turn_row(&pool, &id).await;
        assert_ne!(row.status, TurnStatus::Failed, "{row:?}");
        if app.model.request_count("two-groups") >= 4 {
            waited_after_a = row.status != TurnStatus::Completed;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        waited_after_a,
        "the first group's continuation must not complete the turn"
    );
    let done = wait_for_status(&app, &id, "completed").await;
    let text = text_of(&done["messages"]);
    assert!(
        text.contains("A arrived.") && text.contains("B arrived."),
        "{done}"
    );
    assert_eq!(app.model.request_count("two-groups"), 5);
    let (status, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-two-groups",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(conversation["messages"], done["messages"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect2_a_continuation_whose_results_are_stored_already_settles_its_turn(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (_, agent) = async_agent(
        &app,
        ("job", DELAYED),
        "stored-twice",
        json!({}),
        vec![
            Reply::tool_call("c1", "job", json!({"name": "a"})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Finished."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-stored-twice", "go").await;
    wait_for_status(&app, &id, "completed").await;
    // The state a crash between storing the conversation and settling the
    // turn used to leave: the results are stored, the turn is running and
    // its continuation is queued again.
    let turn = Uuid::parse_str(&id).unwrap();
    sqlx::query("UPDATE async_turns SET status = 'running', settle_event_id = NULL WHERE id = $1")
        .bind(turn)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO continuation_outbox (id, kind, turn_id, group_id, account_id) \
         SELECT $1, 'continue', turn_id, id, account_id FROM dispatch_groups WHERE turn_id = $2",
    )
    .bind(Uuid::now_v7())
    .bind(turn)
    .execute(&pool)
    .await
    .unwrap();
    let done = wait_for_status(&app, &id, "completed").await;
    assert!(text_of(&done["messages"]).contains("Finished."));
    assert_eq!(
        app.model.request_count("stored-twice"),
        3,
        "the stored continuation is not run again"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM continuation_outbox").await,
        0
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect3_deleting_an_agent_fails_its_waiting_turn_and_leaves_no_work(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (_, agent) = async_agent(
        &app,
        ("job", DELAYED),
        "deleted",
        json!({}),
        vec![
            Reply::tool_call("c1", "job", json!({"name": "slow", "ms": 1500})),
            Reply::text("Started."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-deleted", "go").await;
    wait_for_status(&app, &id, "waiting").await;
    let (status, _) = app
        .request(
            reqwest::Method::DELETE,
            &format!("/agents/{agent}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let failed = wait_for_status(&app, &id, "failed").await;
    assert_eq!(failed["error"], "the agent was deleted", "{failed}");
    // The call still finishes; nothing continues and nothing is left queued.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        count(&pool, "SELECT count(*) FROM continuation_outbox").await,
        0
    );
    assert_eq!(app.model.request_count("deleted"), 2);
    assert_eq!(turn_row(&pool, &id).await.status, TurnStatus::Failed);
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect3_a_job_that_used_up_its_attempts_fails_its_turn(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let turn = turn_fixture(&pool).await;
    sqlx::query(
        "INSERT INTO continuation_outbox (id, kind, turn_id, account_id, attempts, last_error) \
         VALUES ($1, 'start', $2, $3, 5, 'the model was unreachable')",
    )
    .bind(Uuid::now_v7())
    .bind(turn)
    .bind(ACCOUNT_A)
    .execute(&pool)
    .await
    .unwrap();
    assert!(jobs::claim(
        &pool,
        &jobs::ClaimTerms {
            claim: Duration::from_secs(10),
            process: uuid::Uuid::now_v7(),
        },
        5,
    )
    .await
    .unwrap()
    .is_none());
    let report = app.state.lifecycle().reap_once().await.unwrap();
    assert_eq!(report.exhausted_turns, 1);
    let row = async_turns::get(&pool, &account(), turn).await.unwrap();
    assert_eq!(row.status, TurnStatus::Failed);
    let error = row.error.unwrap();
    assert!(
        error.contains("after 5 attempts") && error.contains("the model was unreachable"),
        "{error}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM continuation_outbox").await,
        0
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect4_a_job_whose_conversation_is_busy_steps_aside(pool: PgPool) {
    let (first, second) = (turn_fixture(&pool).await, turn_fixture(&pool).await);
    for turn in [first, second] {
        sqlx::query(
            "INSERT INTO continuation_outbox (id, kind, turn_id, account_id) \
             VALUES ($1, 'start', $2, $3)",
        )
        .bind(Uuid::now_v7())
        .bind(turn)
        .bind(ACCOUNT_A)
        .execute(&pool)
        .await
        .unwrap();
    }
    let claim = jobs::ClaimTerms {
        claim: Duration::from_secs(10),
        process: uuid::Uuid::now_v7(),
    };
    let busy = jobs::claim(&pool, &claim, 5).await.unwrap().unwrap();
    assert_eq!(busy.turn_id, first, "the oldest job comes first");
    jobs::postpone(&pool, &busy, Duration::from_secs(5))
        .await
        .unwrap();
    let next = jobs::claim(&pool, &claim, 5).await.unwrap().unwrap();
    assert_eq!(
        next.turn_id, second,
        "a busy job does not starve the others"
    );
    assert!(jobs::claim(&pool, &claim, 5).await.unwrap().is_none());
    let attempts: i32 =
        sqlx::query_scalar("SELECT attempts FROM continuation_outbox WHERE id = $1")
            .bind(busy.id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, 0, "a busy conversation is not a failed attempt");
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect5_a_group_left_unsealed_is_sealed_and_continues_once(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let turn = turn_fixture(&pool).await;
    // A group left open, as earlier versions could leave one: its job is gone.
    let group = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO dispatch_groups (id, account_id, parent, turn_id, job_id) \
         VALUES ($1, $2, $3, $3::uuid, $4)",
    )
    .bind(group)
    .bind(ACCOUNT_A)
    .bind(turn.to_string())
    .bind(Uuid::now_v7())
    .execute(&pool)
    .await
    .unwrap();
    let report = app.state.lifecycle().reap_once().await.unwrap();
    assert_eq!(report.sealed_groups, 0, "a fresh group is left to its run");
    sqlx::query("UPDATE dispatch_groups SET created_at = now() - interval '1 hour' WHERE id = $1")
        .bind(group)
        .execute(&pool)
        .await
        .unwrap();
    let report = app.state.lifecycle().reap_once().await.unwrap();
    assert_eq!(report.sealed_groups, 1);
    let again = app.state.lifecycle().reap_once().await.unwrap();
    assert_eq!(again.sealed_groups, 0);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM continuation_outbox WHERE kind = 'continue'"
        )
        .await,
        1,
        "the sealed group (nothing pending) continues once"
    );
}
