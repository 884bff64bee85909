//! Protocol revisions: the current one is served too and an unsupported
//! one refused, and its task requests without `Mcp-Name` are taken by the
//! name in their params.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

use super::{revision_request, SLOW};

/// One JSON-RPC request of the 2026-07-28 revision (no `initialize`: the
/// version, client and capabilities travel with every request), with the
/// `Mcp-Name` header a conforming client sends.
async fn current_revision(app: &TestApp, method: &str, params: Value, version: &str) -> Value {
    let named = params.get("name").or_else(|| params.get("taskId"));
    let name = named.and_then(Value::as_str).map(str::to_owned);
    revision_request(app, method, params, version, name.as_deref()).await
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_current_revision_is_served_too_and_an_unsupported_one_is_refused(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let discovered = current_revision(&app, "server/discover", json!({}), "2026-07-28").await;
    assert_eq!(
        discovered["result"]["supportedVersions"],
        json!(["2025-11-25", "2026-07-28"]),
        "{discovered}"
    );
    let listed = current_revision(&app, "tools/list", json!({}), "2026-07-28").await;
    assert_eq!(listed["result"]["tools"][0]["name"], "slow", "{listed}");

    let created = current_revision(
        &app,
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 1000}}),
        "2026-07-28",
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let mut task = Value::Null;
    for _ in 0..100 {
        task = current_revision(&app, "tasks/get", json!({"taskId": id}), "2026-07-28").await;
        if task["result"]["status"] != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(task["result"]["status"], "completed", "{task}");
    assert_eq!(
        task["result"]["result"]["structuredContent"],
        json!({"slept": 1000})
    );

    let refused = current_revision(&app, "tools/list", json!({}), "2025-03-26").await;
    assert_eq!(
        refused["error"]["message"], "Unsupported protocol version",
        "{refused}"
    );
    assert_eq!(
        refused["error"]["data"]["supported"],
        json!(["2025-11-25", "2026-07-28"]),
        "{refused}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_request_without_mcp_name_is_taken_as_its_params_name_it(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let created = current_revision(
        &app,
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 3000}}),
        "2026-07-28",
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();

    let unnamed = |method: &'static str| {
        let (app, id) = (&app, id.clone());
        async move { revision_request(app, method, json!({"taskId": id}), "2026-07-28", None).await }
    };
    let polled = unnamed("tasks/get").await;
    assert_eq!(polled["result"]["status"], "working", "{polled}");
    assert_eq!(polled["result"]["taskId"], id.as_str(), "{polled}");

    // A header that names another task is refused, before the task is touched.
    let mismatched = revision_request(
        &app,
        "tasks/cancel",
        json!({"taskId": id}),
        "2026-07-28",
        Some("another-task"),
    )
    .await;
    assert_eq!(mismatched["error"]["code"], -32020, "{mismatched}");

    let cancelled = unnamed("tasks/cancel").await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    let after = unnamed("tasks/get").await;
    assert_eq!(after["result"]["status"], "cancelled", "{after}");
}
