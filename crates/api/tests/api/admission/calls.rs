//! Limits on tool calls: concurrent calls, the call rate and its burst, and
//! live runners, each refused at its limit and admitted again after.

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::AccountLimits;
use toolserver_testsupport::tools;

use crate::app::TestApp;
use crate::support::*;

use super::{
    app_with, assert_refused, generous, limit_in_use, put_limits, rate_left, until_in_use, usage,
    ECHO, SLOW,
};

/// Calls `tool` of account A, sleeping `ms`, in a task of its own; its status.
fn invoke_in_background(app: &TestApp, tool: &str, ms: u64) -> tokio::task::JoinHandle<u16> {
    let (client, base, tool) = (app.client.clone(), app.base().to_owned(), tool.to_owned());
    tokio::spawn(async move {
        let body = json!({"input": {"ms": ms}});
        let response = tools::invoke(&client, &base, &token(ACCOUNT_A), &tool, &body).await;
        response.status().as_u16()
    })
}

#[sqlx::test(migrations = "../../migrations")]
async fn concurrent_calls_are_refused_at_their_limit_and_admitted_again_after(pool: PgPool) {
    let app = app_with(
        pool,
        AccountLimits {
            concurrent_calls: 1,
            ..generous()
        },
    )
    .await;
    let slow = app
        .upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let first = invoke_in_background(&app, &slow, 1500);
    until_in_use(&app, ACCOUNT_A, "concurrentCalls", 1).await;
    assert_refused(
        app.invoke_response(ACCOUNT_A, &slow, json!({"input": {"ms": 1}}))
            .await,
        "concurrentCalls",
        1,
    )
    .await;
    let other = app
        .invoke_response(ACCOUNT_B, &slow, json!({"input": {"ms": 1}}))
        .await;
    assert_eq!(other.status(), 404, "another account is not held back by A");
    assert_eq!(first.await.unwrap(), 200);
    until_in_use(&app, ACCOUNT_A, "concurrentCalls", 0).await;
    assert_eq!(
        app.invoke_response(ACCOUNT_A, &slow, json!({"input": {"ms": 1}}))
            .await
            .status(),
        200
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_call_rate_lets_its_burst_through_then_refuses(pool: PgPool) {
    let app = app_with(
        pool,
        AccountLimits {
            calls_per_minute: 1,
            call_burst: 3,
            ..generous()
        },
    )
    .await;
    let echo = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    for _ in 0..3 {
        assert_eq!(
            app.invoke_response(ACCOUNT_A, &echo, json!({"input": {}}))
                .await
                .status(),
            200
        );
    }
    let body = assert_refused(
        app.invoke_response(ACCOUNT_A, &echo, json!({"input": {}}))
            .await,
        "callsPerMinute",
        1,
    )
    .await;
    let wait = body["error"]["retryAfterMs"].as_u64().unwrap();
    assert!(
        (50_000..=60_000).contains(&wait),
        "one call a minute: the next token is most of a minute away ({wait} ms)"
    );
    assert_eq!(
        rate_left(&usage(&app, ACCOUNT_A).await, "callsPerMinute"),
        0
    );
    assert_eq!(
        rate_left(&usage(&app, ACCOUNT_B).await, "callsPerMinute"),
        3,
        "each account has a bucket of its own"
    );
}

const SPIN: &str = "export default { execute(ctx, input) { const end = Date.now() + input.ms; while (Date.now() < end) {} return { spun: input.ms }; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn live_runners_are_refused_at_their_limit_and_usage_counts_them(pool: PgPool) {
    let app = app_with(pool, generous()).await;
    let slow = app
        .upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let spin = app
        .upload(ACCOUNT_A, "spin", SPIN, json!({"type": "object"}))
        .await;
    assert_eq!(
        put_limits(&app, ACCOUNT_A, json!({"liveRunners": 1}))
            .await
            .status(),
        200
    );
    assert_eq!(
        app.invoke_response(ACCOUNT_A, &spin, json!({"input": {"ms": 300}}))
            .await
            .status(),
        200
    );
    let used = usage(&app, ACCOUNT_A).await;
    assert_eq!(limit_in_use(&used, "liveRunners"), (1, 1), "{used}");
    let cpu = used["runnerCpuSeconds"].as_f64().unwrap();
    assert!(cpu >= 0.2, "the spin's CPU is counted: {used}");

    // The idle runner of `spin` makes room for `slow`'s.
    assert_eq!(
        app.invoke_response(ACCOUNT_A, &slow, json!({"input": {"ms": 1}}))
            .await
            .status(),
        200
    );
    let held = invoke_in_background(&app, &slow, 2500);
    until_in_use(&app, ACCOUNT_A, "concurrentCalls", 1).await;
    // `slow`'s runner is busy: `spin` waits for a runner, then is refused.
    assert_refused(
        app.invoke_response(ACCOUNT_A, &spin, json!({"input": {"ms": 1}}))
            .await,
        "liveRunners",
        1,
    )
    .await;
    assert_eq!(held.await.unwrap(), 200);
}
