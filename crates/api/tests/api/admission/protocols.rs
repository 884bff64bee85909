//! Refusals outside plain HTTP: MCP and the WebSocket refuse in their own
//! forms.

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::AccountLimits;
use toolserver_testsupport::Reply;

use crate::support::*;

use super::{app_with, generous};

#[sqlx::test(migrations = "../../migrations")]
async fn mcp_and_the_websocket_refuse_in_their_own_forms(pool: PgPool) {
    let app = app_with(
        pool,
        AccountLimits {
            concurrent_calls: 0,
            open_turns: 0,
            mcp_tasks: 0,
            ..generous()
        },
    )
    .await;
    app.upload(
        ACCOUNT_A,
        "slow",
        crate::mcp::SLOW,
        json!({"type": "object"}),
    )
    .await;
    for version in ["2025-11-25", "2026-07-28"] {
        let answer = crate::mcp::revision_request(
            &app,
            "tools/call",
            json!({"name": "slow", "arguments": {"ms": 1}}),
            version,
            Some("slow"),
        )
        .await;
        let error = &answer["error"];
        assert_eq!(
            error["code"],
            toolserver_api::mcp::LIMIT_EXCEEDED,
            "{answer}"
        );
        let limit = error["data"]["limit"].as_str().unwrap();
        assert!(["concurrentCalls", "mcpTasks"].contains(&limit), "{answer}");
        assert_eq!(error["data"]["value"], 0, "{answer}");
        assert!(error["data"]["retryAfterMs"].as_u64().is_some(), "{answer}");
    }

    app.model.script("socket", vec![Reply::text("hi")]);
    let agent = app.agent(ACCOUNT_A, "socket", json!({})).await;
    let mut socket = crate::socket::open(&app, &agent).await;
    crate::socket::send(
        &mut socket,
        crate::socket::send_frame("r1", "conv-socket", "hi"),
    )
    .await;
    let answer = crate::socket::answer(&mut socket, "r1").await;
    assert!(
        answer.last.starts_with("error: limit_exceeded")
            && answer.last.contains("openTurns")
            && answer.last.contains("retry after"),
        "{}",
        answer.last
    );
}
