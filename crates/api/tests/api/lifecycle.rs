//! The detached lifecycle under the faults that used to break it: one
//! regression test per defect found in review (named `defectN_…`), and the
//! heartbeat route and deadlines.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_domain::{AccountId, TurnStatus};
use toolserver_store::async_results;
use toolserver_store::async_turns;
use toolserver_store::jobs;
use toolserver_testsupport::Reply;
use uuid::Uuid;

use crate::app::{fast_lifecycle, spawn_live_app, TestApp};
use crate::chunk_stores::Chunks;
use crate::completion::turn_fixture;
use crate::detached::{next_reply, start_async, wait_for_status, wait_for_status_within};
use crate::support::*;

/// Waits `delay` ms (from the input, default 100), then answers with the input.
const DELAYED: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms ?? 100)); return { done: input.name }; } };";

/// Sends `beats` heartbeats `every` ms apart, then returns.
const HEARTBEATING: &str = "export default { async execute(ctx, input) { for (let i = 0; i < input.beats; i++) { await new Promise(r => setTimeout(r, input.every)); await ctx.asyncTool.heartbeat({ beat: i + 1 }); } return { beats: input.beats }; } };";

/// Sends two heartbeats, then goes quiet for a minute.
const GOES_QUIET: &str = "export default { async execute(ctx) { await ctx.asyncTool.heartbeat({ beat: 1 }); await new Promise(r => setTimeout(r, 300)); await ctx.asyncTool.heartbeat({ beat: 2 }); await new Promise(r => setTimeout(r, 60000)); return 'late'; } };";

/// Uploads the tool `(name, source)`, scripts `model` with `replies`, and
/// creates an agent on `model` with the tool async (plus `settings`).
/// Returns the tool id and the agent id.
async fn async_agent(
    app: &TestApp,
    (name, source): (&str, &str),
    model: &str,
    settings: Value,
    replies: Vec<Reply>,
) -> (String, String) {
    let tool = app
        .upload(ACCOUNT_A, name, source, json!({"type": "object"}))
        .await;
    app.model.script(model, replies);
    let mut config = json!({"async": true});
    if let (Some(config), Some(extra)) = (config.as_object_mut(), settings.as_object()) {
        config.extend(extra.clone());
    }
    let agent = app.agent(ACCOUNT_A, model, json!({ &tool: config })).await;
    (tool, agent)
}

/// Waits `ms`, then reports the idempotency key it ran under.
const REPEATABLE: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { key: ctx.asyncTool.idempotencyKey }; } };";

/// SIGKILLs the resident worker of `tool` (account A) mid-call.
async fn kill_worker(app: &TestApp, tool: &str) {
    let key = toolserver_sandbox::ReservationKey::new(
        account(),
        toolserver_domain::ToolId::parse(tool).unwrap(),
    );
    let pid = app
        .executor()
        .worker_pid(&key)
        .await
        .expect("a live worker");
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
}

fn account() -> AccountId {
    AccountId::parse(ACCOUNT_A).unwrap()
}

async fn turn_row(pool: &PgPool, id: &str) -> async_turns::AsyncTurnRecord {
    async_turns::get(pool, &account(), Uuid::parse_str(id).unwrap())
        .await
        .unwrap()
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

fn text_of(messages: &Value) -> String {
    messages.to_string()
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

#[sqlx::test(migrations = "../../migrations")]
async fn defect9_the_token_is_checked_before_the_body(pool: PgPool) {
    let app = TestApp::live(pool).quiet().spawn().await;
    for route in ["complete", "heartbeat"] {
        let response = app
            .client
            .post(format!(
                "{}/sandbox-jobs/{}/{route}",
                app.base(),
                Uuid::now_v7()
            ))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{route}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "{route}: {body}");
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect9_nul_in_a_completion_is_stored_not_refused(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let source = "export default { async execute() { return { text: 'a\\u0000b' }; } };";
    let (_, agent) = async_agent(
        &app,
        ("nul", source),
        "nul-result",
        json!({}),
        vec![
            Reply::tool_call("c1", "nul", json!({})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Got it."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-nul-result", "go").await;
    let done = wait_for_status(&app, &id, "completed").await;
    let arrived = done["messages"].as_array().unwrap().last().unwrap()["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-async_status")
        .unwrap()
        .clone();
    assert_eq!(arrived["output"]["result"]["text"], "a\u{0}b", "{arrived}");
    let told = app.model.requests("nul-result")[2].to_string();
    assert!(
        told.contains("a\\\\u0000b") || told.contains("a\\u0000b"),
        "{told}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_detached_turn_whose_model_writes_nul_is_stored_exactly(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    app.model
        .script("nul-model", vec![Reply::text("before\u{0}after")]);
    let agent = app.agent(ACCOUNT_A, "nul-model", json!({})).await;
    let id = start_async(&app, &agent, "conv-nul-model", "go").await;
    let done = wait_for_status(&app, &id, "completed").await;
    let parts = done["messages"].as_array().unwrap().last().unwrap()["parts"].clone();
    let text: String = parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "before\u{0}after");
    let (_, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-nul-model",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(conversation["messages"], done["messages"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect10_a_nats_requester_hears_when_the_agent_is_deleted(pool: PgPool) {
    let nats = async_nats::connect("127.0.0.1:4222")
        .await
        .expect("NATS on 127.0.0.1:4222 (make test-deps)");
    let subject = format!("toolserver-test.{}.turns", Uuid::new_v4().simple());
    let app = TestApp::live(pool.clone())
        .nats(nats.clone(), &subject)
        .chunks(Chunks::Nats)
        .spawn()
        .await;
    let (_, agent) = async_agent(
        &app,
        ("job", DELAYED),
        "nats-deleted",
        json!({}),
        vec![
            Reply::tool_call("c1", "job", json!({"name": "slow", "ms": 3000})),
            Reply::text("Started."),
        ],
    )
    .await;
    let inbox = nats.new_inbox();
    let mut replies = nats.subscribe(inbox.clone()).await.unwrap();
    let request = json!({"token": token(ACCOUNT_A), "agentId": agent, "request": user_turn("conv-nats-deleted", "go")});
    nats.publish_with_reply(subject, inbox, serde_json::to_vec(&request).unwrap().into())
        .await
        .unwrap();
    let ack = next_reply(&mut replies).await;
    let id = ack["statusId"].as_str().unwrap().to_owned();
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
    let last = next_reply(&mut replies).await;
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(last["error"], "the agent was deleted", "{last}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect10_a_turn_settles_under_the_id_of_the_run_that_ended_it(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let agent = app.agent(ACCOUNT_A, "event-id", json!({})).await;
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    app.model.respond_with("event-id", move |_body, headers| {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        seen.lock().unwrap().push(key);
        Reply::text("Done.")
    });
    let id = start_async(&app, &agent, "conv-event-id", "go").await;
    wait_for_status(&app, &id, "completed").await;
    let event: Uuid = sqlx::query_scalar("SELECT settle_event_id FROM async_turns WHERE id = $1")
        .bind(Uuid::parse_str(&id).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    let keys = keys.lock().unwrap().clone();
    assert_eq!(
        keys,
        vec![Some(format!("{event}.0"))],
        "the model request names the run"
    );
}

/// Fast test settings whose runners are only judged silent after a
/// minute: a call settled sooner was settled by its worker's exit.
fn minute_of_liveness() -> toolserver_harness::HarnessSettings {
    let settings = fast_lifecycle();
    toolserver_harness::HarnessSettings {
        lifecycle: toolserver_harness::lifecycle::LifecycleSettings {
            liveness_timeout: Duration::from_secs(60),
            ..settings.lifecycle.clone()
        },
        ..settings
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_whose_worker_is_killed_fails_at_once_naming_the_exit_and_its_group_continues(
    pool: PgPool,
) {
    let app = TestApp::live(pool.clone())
        .harness(minute_of_liveness())
        .spawn()
        .await;
    let (tool, agent) = async_agent(
        &app,
        ("job", DELAYED),
        "runner-dies",
        json!({}),
        vec![
            Reply::tool_call("c1", "job", json!({"name": "doomed", "ms": 60000})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Heard about it."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-runner-dies", "go").await;
    wait_for_status(&app, &id, "waiting").await;
    kill_worker(&app, &tool).await;
    // Well within the minute the reaper would wait for its pings.
    let done = wait_for_status_within(&app, &id, "completed", Duration::from_secs(30)).await;
    let (status, error): (String, String) =
        sqlx::query_as("SELECT status::text, error FROM async_tool_results")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(status, "failed");
    assert!(
        error.starts_with("the tool's runner exited (killed by signal 9 (SIGKILL))"),
        "{error}"
    );
    let text = text_of(&done["messages"]);
    assert!(text.contains("runner exited (killed by signal 9"), "{done}");
    assert!(text.contains("Heard about it."), "{done}");
    assert_eq!(app.model.request_count("runner-dies"), 3, "continued once");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_safe_to_repeat_is_launched_again_at_once_when_its_worker_is_killed(pool: PgPool) {
    let app = TestApp::live(pool.clone())
        .harness(minute_of_liveness())
        .spawn()
        .await;
    let (tool, agent) = async_agent(
        &app,
        ("repeatable", REPEATABLE),
        "repeat-exit",
        json!({"safeToRepeat": true}),
        vec![
            Reply::tool_call("c1", "repeatable", json!({"ms": 3000})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Done after all."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-repeat-exit", "go").await;
    wait_for_status(&app, &id, "waiting").await;
    kill_worker(&app, &tool).await;
    let done = wait_for_status_within(&app, &id, "completed", Duration::from_secs(30)).await;
    let (status, launches): (String, i32) =
        sqlx::query_as("SELECT status::text, launches FROM async_tool_results")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), launches),
        ("completed", 2),
        "launched once more"
    );
    assert!(text_of(&done["messages"]).contains("Done after all."));
    assert_eq!(app.model.request_count("repeat-exit"), 3);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_tool_that_heartbeats_outlives_its_heartbeat_timeout(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (_, agent) = async_agent(
        &app,
        ("beats", HEARTBEATING),
        "heartbeats",
        json!({"heartbeatTimeoutSeconds": 5, "timeoutSeconds": 120}),
        vec![
            Reply::tool_call("c1", "beats", json!({"beats": 30, "every": 1000})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Finished."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-heartbeats", "go").await;
    wait_for_status(&app, &id, "waiting").await;
    let (result_id,): (Uuid,) = sqlx::query_as("SELECT id FROM async_tool_results")
        .fetch_one(&pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let record = async_results::get(&pool, &account(), result_id)
        .await
        .unwrap();
    assert_eq!(record.status, toolserver_domain::CallStatus::Pending);
    assert!(record.progress.unwrap()["beat"].as_u64().unwrap() >= 5);
    assert!(record.last_heartbeat_at.is_some());
    let done = wait_for_status_within(&app, &id, "completed", Duration::from_secs(40)).await;
    let text = text_of(&done["messages"]);
    assert!(
        text.contains("\"beats\":30") && text.contains("Finished."),
        "{done}"
    );
    assert_eq!(app.model.request_count("heartbeats"), 3);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_tool_that_stops_heartbeating_expires_and_its_group_continues_once(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (_, agent) = async_agent(
        &app,
        ("quiet", GOES_QUIET),
        "goes-quiet",
        json!({"heartbeatTimeoutSeconds": 2}),
        vec![
            Reply::tool_call("c1", "quiet", json!({})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("It went quiet."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-goes-quiet", "go").await;
    let done = wait_for_status(&app, &id, "completed").await;
    let (settled_after,): (f64,) = sqlx::query_as(
        "SELECT EXTRACT(EPOCH FROM settled_at - last_heartbeat_at)::float8 FROM async_tool_results",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        (2.0..2.0 + 1.0).contains(&settled_after),
        "expired {settled_after} s after the last heartbeat (timeout 2 s, reaper 50 ms)"
    );
    let text = text_of(&done["messages"]);
    assert!(
        text.contains("expired") && text.contains("It went quiet."),
        "{done}"
    );
    assert_eq!(
        app.model.request_count("goes-quiet"),
        3,
        "the group continues once"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_heartbeat_route_answers_each_case(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let turn = turn_fixture(&pool).await;
    let token = "t".repeat(64);
    let call = |ttl: Duration| async_results::NewAsyncResult {
        tool_call_id: "c".into(),
        tool_id: None,
        tool_name: "beats".into(),
        token_sha256: <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into(),
        ttl,
        heartbeat_timeout: Some(Duration::from_secs(5)),
        liveness_timeout: Duration::from_secs(10),
        input: json!({}),
        safe_to_repeat: false,
    };
    let owner = async_results::PassOwner {
        turn_id: turn,
        job_id: Uuid::now_v7(),
    };
    let calls = [
        call(Duration::from_secs(60)),
        call(Duration::ZERO),
        call(Duration::from_secs(60)),
    ];
    let ids = async_results::register_pass(&pool, &account(), owner, &calls)
        .await
        .unwrap();
    let (live, expired, other) = (ids[0], ids[1], ids[2]);
    let beat = |id: Uuid, token: Option<String>, body: Value| {
        let request = app
            .client
            .post(format!("{}/sandbox-jobs/{id}/heartbeat", app.base()))
            .json(&body);
        let request = match token {
            Some(token) => request.header("x-job-token", token),
            None => request,
        };
        async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, body) = beat(live, Some(token.clone()), json!({"progress": {"pct": 40}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending");
    let record = async_results::get(&pool, &account(), live).await.unwrap();
    assert_eq!(record.progress, Some(json!({"pct": 40})));
    let first_deadline = record.expires_at;
    let (status, _) = beat(live, Some(token.clone()), json!({"liveness": true})).await;
    assert_eq!(status, 200);
    let record = async_results::get(&pool, &account(), live).await.unwrap();
    assert_eq!(
        record.expires_at, first_deadline,
        "a liveness ping moves no deadline"
    );
    assert_eq!(record.progress, Some(json!({"pct": 40})));
    assert_eq!(beat(live, None, json!({})).await.0, 401);
    assert_eq!(beat(live, Some("x".repeat(64)), json!({})).await.0, 403);
    assert_eq!(
        beat(Uuid::now_v7(), Some(token.clone()), json!({})).await.0,
        404
    );
    assert_eq!(
        beat(live, Some(token.clone()), json!({"speed": 1})).await.0,
        400,
        "unknown fields are refused"
    );
    async_results::settle(
        &pool,
        live,
        &async_results::AsyncOutcome::Completed(json!(1)),
    )
    .await
    .unwrap();
    assert_eq!(beat(live, Some(token.clone()), json!({})).await.0, 409);
    assert_eq!(beat(expired, Some(token.clone()), json!({})).await.0, 410);
    // Tenancy: the token is the only key, and it opens nothing else.
    assert_eq!(beat(other, Some("y".repeat(64)), json!({})).await.0, 403);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_safe_to_repeat_is_launched_again_when_its_runner_dies(pool: PgPool) {
    let settings = fast_lifecycle();
    let settings = toolserver_harness::HarnessSettings {
        lifecycle: toolserver_harness::lifecycle::LifecycleSettings {
            liveness_timeout: Duration::from_secs(2),
            liveness_interval: Duration::from_millis(300),
            ..settings.lifecycle.clone()
        },
        ..settings
    };
    let app = TestApp::live(pool.clone()).harness(settings).spawn().await;
    let (tool, agent) = async_agent(
        &app,
        ("repeatable", REPEATABLE),
        "repeatable",
        json!({"safeToRepeat": true}),
        vec![
            Reply::tool_call("c1", "repeatable", json!({"ms": 3000})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Done after all."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-repeatable", "go").await;
    wait_for_status(&app, &id, "waiting").await;
    kill_worker(&app, &tool).await;
    let done = wait_for_status(&app, &id, "completed").await;
    let (result_id, launches): (Uuid, i32) =
        sqlx::query_as("SELECT id, launches FROM async_tool_results")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(launches, 2, "launched once more, not failed");
    let arrived = done["messages"].as_array().unwrap().last().unwrap()["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-async_status")
        .unwrap()
        .clone();
    assert_eq!(arrived["output"]["status"], "completed", "{arrived}");
    assert_eq!(
        arrived["output"]["result"]["key"],
        result_id.to_string(),
        "the relaunch ran under the call's idempotency key"
    );
    assert!(text_of(&done["messages"]).contains("Done after all."));
    assert_eq!(app.model.request_count("repeatable"), 3);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_silent_call_is_launched_again_only_while_safe_and_under_its_launch_bound(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let turn = turn_fixture(&pool).await;
    let call = |tool_call_id: &str, safe_to_repeat: bool| async_results::NewAsyncResult {
        tool_call_id: tool_call_id.into(),
        tool_id: None,
        tool_name: "job".into(),
        token_sha256: [1; 32],
        ttl: Duration::from_secs(600),
        heartbeat_timeout: None,
        liveness_timeout: Duration::from_secs(600),
        input: json!({}),
        safe_to_repeat,
    };
    let owner = async_results::PassOwner {
        turn_id: turn,
        job_id: Uuid::now_v7(),
    };
    let calls = [
        call("once", false),
        call("again", true),
        call("spent", true),
    ];
    let ids = async_results::register_pass(&pool, &account(), owner, &calls)
        .await
        .unwrap();
    // Every runner went silent; the last call was launched three times already.
    sqlx::query("UPDATE async_tool_results SET alive_until = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE async_tool_results SET launches = 3 WHERE id = $1")
        .bind(ids[2])
        .execute(&pool)
        .await
        .unwrap();
    let report = app.state.lifecycle().reap_once().await.unwrap();
    assert_eq!((report.relaunched, report.silent_runners), (1, 2));
    let statuses: Vec<(Uuid, String, i32)> =
        sqlx::query_as("SELECT id, status, launches FROM async_tool_results ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        statuses,
        vec![
            (ids[0], "failed".to_owned(), 1),
            (ids[1], "pending".to_owned(), 2),
            (ids[2], "failed".to_owned(), 3),
        ]
    );
    let queued: Vec<(String, Option<Uuid>)> =
        sqlx::query_as("SELECT kind, call_id FROM continuation_outbox")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(queued, vec![("relaunch".to_owned(), Some(ids[1]))]);
    let again = app.state.lifecycle().reap_once().await.unwrap();
    assert_eq!(
        (again.relaunched, again.silent_runners),
        (0, 0),
        "the relaunched call has its liveness window again"
    );
}
