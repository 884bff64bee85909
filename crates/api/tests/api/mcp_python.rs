//! `/mcp` through the official MCP Python SDK (`mcp`, pinned in
//! clients/mcp-python/requirements.txt, in the virtualenv
//! scripts/test-services.sh makes), declaring the tasks extension on every
//! request: listing, a plain call, progress from a generator, a task polled
//! to completion, and the SDK's OAuth protected-resource discovery.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::clients::{client_dir, venv_python};

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

const ECHO: &str =
    "export default { async execute(ctx, input) { return { echoed: input.text }; } };";
const COUNTS: &str = "export default { async *execute(ctx, input) { for (let i = 1; i <= input.to; i++) { yield { count: i }; await new Promise(r => setTimeout(r, 30)); } } };";
const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

/// The virtualenv's Python: `MCP_PYTHON`, else where the test setup puts it.
fn python() -> PathBuf {
    std::env::var_os("MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| venv_python("mcp-python"))
}

/// Runs the Python client's `command` as `account` (no token with `None`).
pub(crate) async fn mcp_python(app: &TestApp, account: Option<&str>, command: &[&str]) -> Value {
    let interpreter = python();
    let mut process = tokio::process::Command::new(&interpreter);
    process
        .arg(client_dir("mcp-python").join("mcp_client.py"))
        .args(command)
        .env("MCP_URL", format!("{}/mcp", app.base()));
    if let Some(account) = account {
        process.env("MCP_TOKEN", token(account));
    }
    let output = process.output().await.unwrap_or_else(|err| {
        panic!(
            "{}: {err} (run scripts/test-services.sh to make the virtualenv)",
            interpreter.display()
        )
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python MCP client crashed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!(
            "{err}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn text_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// Settings whose longest task poll interval no test task reaches, so each
/// suggestion is the task's own.
fn unbounded_polls() -> toolserver_api::ApiSettings {
    let mut api = toolserver_api::ApiSettings::default();
    api.mcp.task_poll_interval = Duration::from_secs(60);
    api
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_python_sdk_lists_calls_sees_progress_and_runs_a_task_to_completion(pool: PgPool) {
    let app = TestApp::live(pool).api(unbounded_polls()).spawn().await;
    app.upload(ACCOUNT_A, "echo", ECHO, text_schema()).await;
    app.upload(ACCOUNT_A, "counts", COUNTS, json!({"type": "object"}))
        .await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;

    let listing = mcp_python(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(listing["protocolVersion"], "2026-07-28", "{listing}");
    let mut names: Vec<&str> = listing["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listing}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["counts", "echo", "slow"], "{listing}");

    let called = mcp_python(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":"hi"}"#]).await;
    assert_eq!(
        called["result"]["structuredContent"],
        json!({"echoed": "hi"}),
        "{called}"
    );

    // A generator's yields arrive as progress before the result, though the
    // client takes tasks.
    let streamed = mcp_python(&app, Some(ACCOUNT_A), &["call", "counts", r#"{"to":3}"#]).await;
    assert_eq!(
        streamed["order"],
        json!(["progress", "progress", "progress", "result"]),
        "{streamed}"
    );
    for (step, update) in streamed["progress"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            update["progress"].as_f64(),
            Some(step as f64 + 1.0),
            "{streamed}"
        );
        assert_eq!(update["message"], json!({"count": step + 1}).to_string());
    }
    assert_eq!(
        streamed["result"]["structuredContent"],
        json!({"count": 3}),
        "{streamed}"
    );
    assert_eq!(streamed["task"], Value::Null, "{streamed}");

    // A call that outlives the inline window is a task, polled to its end.
    let tasked = mcp_python(&app, Some(ACCOUNT_A), &["call", "slow", r#"{"ms":1500}"#]).await;
    let task = &tasked["task"];
    assert_eq!(task["resultType"], "task", "{tasked}");
    assert_eq!(task["status"], "working", "{tasked}");
    let polls = tasked["polls"].as_array().unwrap();
    let last = polls.last().unwrap_or_else(|| panic!("{tasked}"));
    assert_eq!(last["status"], "completed", "{tasked}");
    assert_eq!(last["taskId"], task["taskId"], "{tasked}");
    assert_eq!(
        tasked["result"]["structuredContent"],
        json!({"slept": 1500}),
        "{tasked}"
    );

    // Each suggested poll interval follows the task's age: at least half the
    // inline window, and longer at each poll while the task works.
    let intervals: Vec<u64> = std::iter::once(task)
        .chain(polls.iter())
        .map(|seen| seen["pollIntervalMs"].as_u64().unwrap())
        .collect();
    assert!(intervals[0] >= 125, "{tasked}");
    assert!(
        intervals.windows(2).all(|pair| pair[0] < pair[1]),
        "{intervals:?}: {tasked}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_echo_called_by_a_tasks_declaring_client_comes_back_inline_not_as_a_task(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "echo", ECHO, text_schema()).await;
    let called = mcp_python(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":"hi"}"#]).await;
    assert_eq!(called["task"], Value::Null, "{called}");
    assert_eq!(called["polls"], json!([]), "{called}");
    assert_eq!(called["result"]["isError"], false, "{called}");
    assert_eq!(
        called["result"]["content"][0]["text"], r#"{"echoed":"hi"}"#,
        "{called}"
    );
    // Nothing was left behind for the inline answer.
    let (tasks,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM async_tool_results WHERE group_id IS NULL")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(tasks, 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_protected_resource_metadata_validates_with_the_python_sdk(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let discovered = mcp_python(&app, None, &["discover"]).await;
    let endpoint_url = format!("{}/.well-known/oauth-protected-resource/mcp", app.base());
    let root_url = format!("{}/.well-known/oauth-protected-resource", app.base());
    assert_eq!(
        discovered["challenge"],
        endpoint_url.as_str(),
        "{discovered}"
    );
    let documents = &discovered["documents"];
    let endpoint = &documents[&endpoint_url];
    assert_eq!(
        endpoint["resource"],
        format!("{}/mcp", app.base()),
        "{discovered}"
    );
    // With no authorization server or issuer configured: the server's origin.
    assert_eq!(
        endpoint["authorization_servers"],
        json!([app.base()]),
        "{discovered}"
    );
    let root = &documents[&root_url];
    assert_eq!(root["resource"], app.base(), "{discovered}");
    assert_eq!(
        root["authorization_servers"], endpoint["authorization_servers"],
        "{discovered}"
    );
}
