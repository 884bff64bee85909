//! Task-augmented calls: polled to completion and hidden from other
//! accounts, cancelled, or stopped on their runner at their TTL.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

use super::{mcp, names, SLOW};

const HANGS: &str = "export default { async execute(ctx) { await new Promise((resolve, reject) => { ctx.signal.addEventListener('abort', () => reject(new Error('aborted'))); setTimeout(resolve, 60000); }); return 'late'; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_is_polled_to_completion_and_another_account_cannot_see_it(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let created = mcp(&app, Some(ACCOUNT_A), &["task", "slow", r#"{"ms":4000}"#]).await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    assert_eq!(created["ttlMs"], 3_600_000, "{created}");
    let interval = created["pollIntervalMs"].as_u64().unwrap();
    assert!((125..=1000).contains(&interval), "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();

    let waited = mcp(&app, Some(ACCOUNT_A), &["wait", &id]).await;
    let task = &waited["task"];
    assert_eq!(task["status"], "completed", "{waited}");
    assert_eq!(task["result"]["structuredContent"], json!({"slept": 4000}));
    assert_eq!(waited["seen"][0], "working", "{waited}");

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
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_cancelled_task_stops_its_runner_call(pool: PgPool) {
    let app = spawn_live_app(pool).await;
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
async fn a_task_still_working_at_its_ttl_is_stopped_on_its_runner(pool: PgPool) {
    let mut api = toolserver_api::ApiSettings::default();
    api.mcp.task_ttl = Duration::from_secs(2);
    let app = TestApp::live(pool).api(api).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    let created = mcp(&app, Some(ACCOUNT_A), &["task", "hangs", "{}"]).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 1).await,
        "the call never started"
    );
    // No client polls it: at its TTL the runner call is stopped all the same.
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 0).await,
        "the runner call outlived its task's TTL"
    );
    let gone = mcp(&app, Some(ACCOUNT_A), &["get", &id]).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
}
