//! Crash safety of detached turns, with the real binary killed by SIGKILL:
//! a continuation enqueued before the crash runs exactly once after the
//! restart, and a continuation cut off mid-run is run again and the turn
//! completes once.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::server::{script, Setup};

/// Queued jobs, continued groups, and the most attempts of a queued job.
async fn outbox(pool: &PgPool) -> (i64, i64, i32) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM continuation_outbox), \
                (SELECT count(*) FROM dispatch_groups WHERE continued_at IS NOT NULL), \
                (SELECT COALESCE(max(attempts), 0) FROM continuation_outbox)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_continuation_enqueued_before_a_crash_runs_once_after_restart(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    script(&model, Reply::text("Both finished."));
    // This server looks for continuations only every ten minutes.
    let mut server = setup.start(600_000).await;
    let id = setup.detached_turn(&server, &model).await;
    until("both completions and the group's continuation", || async {
        outbox(&pool).await.1 == 1
    })
    .await;
    assert_eq!(outbox(&pool).await, (1, 1, 0), "enqueued, not yet claimed");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    let server = setup.start(50).await;
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    assert_eq!(
        outbox(&pool).await,
        (0, 1, 0),
        "the job ran and left no row"
    );
    assert_eq!(model.request_count("crash"), 3, "one continuation pass");
    let answer = setup.status(&server, &id).await;
    assert!(
        answer["messages"].to_string().contains("Both finished."),
        "{answer}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_continuation_cut_off_by_a_crash_runs_again_and_completes_once(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    // The continuation's model pass hangs, so the crash lands mid-run.
    script(
        &model,
        Reply::text("never").delay_first(Duration::from_secs(600)),
    );
    let mut server = setup.start(50).await;
    let id = setup.detached_turn(&server, &model).await;
    until("the continuation's model pass", || async {
        model.request_count("crash") == 3
    })
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    script(&model, Reply::text("Finished after all."));
    let server = setup.start(50).await;
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    assert_eq!(outbox(&pool).await, (0, 1, 0));
    assert_eq!(
        model.request_count("crash"),
        4,
        "the cut-off continuation pass was asked again, once"
    );
    let answer = setup.status(&server, &id).await;
    let text = answer["messages"].to_string();
    assert!(text.contains("Finished after all."), "{answer}");
    assert!(!text.contains("never"), "{answer}");
    let settled: i64 =
        sqlx::query_scalar("SELECT count(*) FROM async_turns WHERE settle_event_id IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(settled, 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_first_pass_cut_off_by_a_crash_is_run_again_elsewhere(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    model.script(
        "crash",
        vec![Reply::text("never").delay_first(Duration::from_secs(600))],
    );
    let mut server = setup.start(50).await;
    let id = setup.detached_turn(&server, &model).await;
    until("the first model pass", || async {
        model.request_count("crash") == 1
    })
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    model.script("crash", vec![Reply::text("Answered after the crash.")]);
    let server = setup.start(50).await;
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    let answer = setup.status(&server, &id).await;
    let text = answer["messages"].to_string();
    assert!(text.contains("Answered after the crash."), "{answer}");
    assert!(!text.contains("never"), "{answer}");
    assert_eq!(model.request_count("crash"), 2);
    assert_eq!(outbox(&pool).await.0, 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn calls_launched_before_a_crash_fail_fast_and_their_group_continues_once(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    // The first pass launches both calls; the second pass (its answer to
    // the pending results) hangs, so the crash lands after the launch.
    model.script(
        "crash",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a", "ms": 60000})).and_tool_call(
                "c2",
                "job",
                json!({"job": "b", "ms": 60000}),
            ),
            Reply::text("never").delay_first(Duration::from_secs(600)),
        ],
    );
    let mut server = setup.start(50).await;
    let id = setup.detached_turn(&server, &model).await;
    until("the second model pass", || async {
        model.request_count("crash") == 2
    })
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    model.script(
        "crash",
        // The launch pass's message died with the server: the continuation
        // restores its two calls (step 0), then tells their results (step 1).
        vec![
            Reply::error(500, "step 0 is the restored launch"),
            Reply::error(500, "step 1 is the injected results"),
            Reply::text("Both runners died."),
        ],
    );
    let server = setup.start(50).await;
    let started = Instant::now();
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "settled within the liveness timeout, not the TTL"
    );
    let answer = setup.status(&server, &id).await;
    let text = answer["messages"].to_string();
    assert!(text.contains("Both runners died."), "{answer}");
    assert!(
        text.contains("no ping from the runner of this call was heard"),
        "{answer}"
    );
    let parts = answer["messages"].as_array().unwrap().last().unwrap()["parts"].clone();
    let restored: Vec<&Value> = parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "tool-job")
        .collect();
    assert_eq!(restored.len(), 2, "both lost calls are back: {parts}");
    assert!(restored
        .iter()
        .all(|p| p["output"]["status"] == "pending" && p["input"]["ms"] == 60000));
    assert_eq!(
        model.request_count("crash"),
        3,
        "the launch pass is not asked again; the group continues once"
    );
    assert_eq!(outbox(&pool).await, (0, 1, 0));
}
