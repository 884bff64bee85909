//! Detached calls whose worker or runner dies or goes silent: a killed
//! worker fails its call at once, and a call whose tool's effects allow
//! repeats (`read` or `idempotent`, as narrowed by the agent config) is
//! launched again, only while safe and under its launch bound.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::ResultId;
use toolserver_store::async_results;
use toolserver_testsupport::Reply;
use uuid::Uuid;

use crate::app::{fast_lifecycle, TestApp};
use crate::completion::turn_fixture;
use crate::detached::{start_async, wait_for_status, wait_for_status_within};
use crate::support::ACCOUNT_A;

use super::{account, async_agent, async_agent_declaring, text_of, DELAYED};

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
async fn an_idempotent_call_is_launched_again_at_once_when_its_worker_is_killed(pool: PgPool) {
    let app = TestApp::live(pool.clone())
        .harness(minute_of_liveness())
        .spawn()
        .await;
    let (tool, agent) = async_agent_declaring(
        &app,
        ("repeatable", REPEATABLE),
        json!({"effects": "idempotent"}),
        "repeat-exit",
        json!({}),
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
async fn a_read_only_call_is_launched_again_when_its_runner_dies(pool: PgPool) {
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
    let (tool, agent) = async_agent_declaring(
        &app,
        ("repeatable", REPEATABLE),
        json!({"effects": "read"}),
        "repeatable",
        json!({}),
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
    let (result_id, launches): (ResultId, i32) =
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
async fn a_stored_config_claiming_safe_to_repeat_loads_but_a_side_effect_call_is_not_launched_again(
    pool: PgPool,
) {
    let app = TestApp::live(pool.clone())
        .harness(minute_of_liveness())
        .spawn()
        .await;
    let (tool, agent) = async_agent(
        &app,
        ("repeatable", REPEATABLE),
        "stored-claim",
        json!({}),
        vec![
            Reply::tool_call("c1", "repeatable", json!({"ms": 60000})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Heard about it."),
        ],
    )
    .await;
    // Saved before effects existed: `safeToRepeat: true` on a tool that
    // declares none (so `side_effect`), which a save now refuses.
    sqlx::query(
        "UPDATE agents SET config = jsonb_set(config, ARRAY['tools', $1, 'safeToRepeat'], 'true')",
    )
    .bind(&tool)
    .execute(&pool)
    .await
    .unwrap();
    let id = start_async(&app, &agent, "conv-stored-claim", "go").await;
    wait_for_status(&app, &id, "waiting").await;
    let repeatable: bool = sqlx::query_scalar("SELECT safe_to_repeat FROM async_tool_results")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        !repeatable,
        "the claim is ignored: the tool's effects decide"
    );
    kill_worker(&app, &tool).await;
    let done = wait_for_status_within(&app, &id, "completed", Duration::from_secs(30)).await;
    let (status, launches): (String, i32) =
        sqlx::query_as("SELECT status::text, launches FROM async_tool_results")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), launches),
        ("failed", 1),
        "not launched again"
    );
    assert!(text_of(&done["messages"]).contains("Heard about it."));
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_whose_effects_the_agent_narrowed_to_side_effect_is_not_marked_repeatable(
    pool: PgPool,
) {
    let app = TestApp::live(pool.clone()).spawn().await;
    let mut ids = Vec::new();
    for name in ["kept", "narrowed"] {
        let fields = json!({"effects": "idempotent"});
        let schema = json!({"type": "object"});
        ids.push(
            app.upload_declaring(ACCOUNT_A, (name, DELAYED), schema, fields)
                .await,
        );
    }
    let (kept, narrowed) = (&ids[0], &ids[1]);
    app.model.script(
        "narrowing",
        vec![
            Reply::tool_call("c1", "kept", json!({"name": "k"})).and_tool_call(
                "c2",
                "narrowed",
                json!({"name": "n"}),
            ),
            Reply::text("Both started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Both finished."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "narrowing",
            json!({
                kept: {"async": true},
                narrowed: {"async": true, "effects": "side_effect"},
            }),
        )
        .await;
    let id = start_async(&app, &agent, "conv-narrowing", "go").await;
    wait_for_status(&app, &id, "completed").await;
    let marked: Vec<(String, bool)> = sqlx::query_as(
        "SELECT tool_name, safe_to_repeat FROM async_tool_results ORDER BY tool_name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        marked,
        vec![("kept".to_owned(), true), ("narrowed".to_owned(), false)]
    );
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
    let statuses: Vec<(ResultId, String, i32)> =
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
    let queued: Vec<(String, Option<ResultId>)> =
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
