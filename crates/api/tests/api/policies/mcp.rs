//! MCP: a tool the policies deny whatever the input is not listed by
//! `tools/list` (both official SDK clients, TypeScript and Python), and a
//! call the policies refuse is a tool error naming the policy.

use serde_json::json;
use sqlx::PgPool;

use crate::app::spawn_live_app;
use crate::mcp::{mcp, names};
use crate::mcp_python::mcp_python;
use crate::support::*;

use super::{save_policies, tool};

#[sqlx::test(migrations = "../../migrations")]
async fn a_denied_tool_is_not_listed_and_a_denied_call_is_a_tool_error(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    for (name, effects) in [
        ("lookup", "read"),
        ("refund", "idempotent"),
        ("wipe", "read"),
    ] {
        tool(&app, ACCOUNT_A, name, Some(effects)).await;
    }
    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["lookup", "refund", "wipe"], "{listing}");
    save_policies(
        &app,
        ACCOUNT_A,
        r#"@id("anything") permit(principal, action, resource);
           @id("never-wipe") forbid(principal, action == Action::"wipe", resource);
           @id("refund-cap") forbid(principal, action == Action::"refund", resource) when { context.input.amount > 500 };"#,
    )
    .await;
    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["lookup", "refund"], "{listing}");
    let python = mcp_python(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&python), ["lookup", "refund"], "{python}");

    let refused = mcp(
        &app,
        Some(ACCOUNT_A),
        &["call", "refund", r#"{"amount":501}"#],
    )
    .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("`refund-cap`"), "{text}");
    let ran = mcp(
        &app,
        Some(ACCOUNT_A),
        &["call", "refund", r#"{"amount":499}"#],
    )
    .await;
    assert_eq!(ran["result"]["isError"], false, "{ran}");
    assert_eq!(
        ran["result"]["structuredContent"],
        json!({"echo": {"amount": 499}})
    );
    let wiped = mcp(&app, Some(ACCOUNT_A), &["call", "wipe", r#"{"amount":1}"#]).await;
    let text = wiped["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("`never-wipe`"), "{text}");
}
