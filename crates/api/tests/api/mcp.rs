//! `/mcp` through the official MCP TypeScript SDK client (clients/mcp):
//! listing, plain and streaming calls, tool errors against protocol errors,
//! task-augmented calls polled to completion and cancelled (the runner call
//! stops), OAuth discovery, and tenancy.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::live::LiveApp;
use crate::support::*;

const ECHO: &str =
    "export default { async execute(ctx, input) { return { echoed: input.text }; } };";
const COUNTS: &str = "export default { async *execute(ctx, input) { for (let i = 1; i <= input.to; i++) { yield { count: i }; await new Promise(r => setTimeout(r, 30)); } } };";
const THROWS: &str = "export default { async execute() { throw new Error('the tool broke'); } };";
const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";
const HANGS: &str = "export default { async execute(ctx) { await new Promise((resolve, reject) => { ctx.signal.addEventListener('abort', () => reject(new Error('aborted'))); setTimeout(resolve, 60000); }); return 'late'; } };";

fn client_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../clients/mcp")
}

/// Runs the SDK client's `command` as `account` (no token with `None`).
async fn mcp(app: &LiveApp, account: Option<&str>, command: &[&str]) -> Value {
    let mut node = tokio::process::Command::new("node");
    node.arg("bin/mcp.mjs")
        .args(command)
        .current_dir(client_dir())
        .env("MCP_URL", format!("{}/mcp", app.base));
    if let Some(account) = account {
        node.env("MCP_TOKEN", token(account));
    }
    let output = node.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the MCP client crashed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!(
            "{err}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn names(listing: &Value) -> Vec<String> {
    let mut names: Vec<String> = listing["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listing}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn text_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_sdk_lists_and_calls_an_accounts_tools_and_sees_progress_before_the_result(
    pool: PgPool,
) {
    let app = LiveApp::start(pool).await;
    app.upload(ACCOUNT_A, "echo", ECHO, text_schema()).await;
    app.upload(ACCOUNT_A, "counts", COUNTS, json!({"type": "object"}))
        .await;
    app.upload(ACCOUNT_A, "throws", THROWS, json!({"type": "object"}))
        .await;

    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["counts", "echo", "throws"], "{listing}");
    let echo = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "echo")
        .unwrap();
    assert_eq!(echo["inputSchema"], text_schema(), "{echo}");
    assert_eq!(
        echo["_meta"]["io.modelcontextprotocol/tasks"]["taskSupport"], "optional",
        "{echo}"
    );

    let called = mcp(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":"hi"}"#]).await;
    let result = &called["result"];
    assert_eq!(result["isError"], false, "{called}");
    assert_eq!(
        result["structuredContent"],
        json!({"echoed": "hi"}),
        "{called}"
    );
    assert_eq!(
        result["content"][0]["text"], r#"{"echoed":"hi"}"#,
        "{called}"
    );

    let streamed = mcp(&app, Some(ACCOUNT_A), &["call", "counts", r#"{"to":3}"#]).await;
    let progress = streamed["progress"].as_array().unwrap();
    assert_eq!(progress.len(), 3, "{streamed}");
    for (step, update) in progress.iter().enumerate() {
        assert_eq!(update["progress"], step + 1, "{streamed}");
        assert_eq!(update["message"], json!({"count": step + 1}).to_string());
    }
    assert_eq!(
        streamed["order"],
        json!(["progress", "progress", "progress", "result"]),
        "{streamed}"
    );
    assert_eq!(streamed["result"]["structuredContent"], json!({"count": 3}));

    // A failing tool and a bad input are tool errors the model can read;
    // an unknown tool is a protocol error.
    let failed = mcp(&app, Some(ACCOUNT_A), &["call", "throws", "{}"]).await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let text = failed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("the tool broke"), "{failed}");
    let invalid = mcp(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":5}"#]).await;
    assert_eq!(invalid["result"]["isError"], true, "{invalid}");
    let text = invalid["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("inputSchema"), "{invalid}");
    let unknown = mcp(&app, Some(ACCOUNT_A), &["call", "nope", "{}"]).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool: nope"),
        "{unknown}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn tools_list_pages_with_a_cursor(pool: PgPool) {
    let mut api = toolserver_api::ApiSettings::default();
    api.mcp.page_size = 2;
    let app = LiveApp::start_settings(pool, api, crate::live::fast_lifecycle()).await;
    for name in ["a1", "a2", "a3", "a4", "a5"] {
        app.upload(ACCOUNT_A, name, ECHO, text_schema()).await;
    }
    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["a1", "a2", "a3", "a4", "a5"], "{listing}");
    assert_eq!(listing["pages"], 3, "{listing}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_is_polled_to_completion_and_another_account_cannot_see_it(pool: PgPool) {
    let app = LiveApp::start(pool).await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let created = mcp(&app, Some(ACCOUNT_A), &["task", "slow", r#"{"ms":3000}"#]).await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    assert_eq!(created["ttlMs"], 3_600_000, "{created}");
    assert_eq!(created["pollIntervalMs"], 1000, "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();

    // Another account's task id is not found, for reading and cancelling.
    let foreign = mcp(&app, Some(ACCOUNT_B), &["get", &id]).await;
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    assert!(foreign["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no such task"));
    let foreign = mcp(&app, Some(ACCOUNT_B), &["cancel", &id]).await;
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    assert_eq!(names(&mcp(&app, Some(ACCOUNT_B), &["list"]).await).len(), 0);

    let waited = mcp(&app, Some(ACCOUNT_A), &["wait", &id]).await;
    let task = &waited["task"];
    assert_eq!(task["status"], "completed", "{waited}");
    assert_eq!(task["result"]["structuredContent"], json!({"slept": 3000}));
    assert_eq!(waited["seen"][0], "working", "{waited}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_cancelled_task_stops_its_runner_call(pool: PgPool) {
    let app = LiveApp::start(pool).await;
    let tool = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    let created = mcp(&app, Some(ACCOUNT_A), &["task", "hangs", "{}"]).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 1).await,
        "the call never started"
    );
    let cancelled = mcp(&app, Some(ACCOUNT_A), &["cancel", &id]).await;
    assert_eq!(cancelled["task"]["status"], "cancelled", "{cancelled}");
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 0).await,
        "the runner call outlived the cancel"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = mcp(&app, Some(ACCOUNT_A), &["get", &id]).await;
    assert_eq!(after["status"], "cancelled", "{after}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn without_a_token_the_answer_points_at_the_protected_resource_metadata(pool: PgPool) {
    let app = LiveApp::start(pool).await;
    let refused = app
        .client
        .post(format!("{}/mcp", app.base))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", app.base);
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let forged = app
        .client
        .post(format!("{}/mcp", app.base))
        .bearer_auth("not-a-token")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    assert!(forged.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer error=\"invalid_token\""));

    let discovered = mcp(&app, None, &["discover"]).await;
    assert_eq!(
        discovered["metadata"]["resource"],
        format!("{}/mcp", app.base),
        "{discovered}"
    );
    let without = mcp(&app, None, &["list"]).await;
    assert_eq!(without["error"]["code"], 401, "{without}");
}
