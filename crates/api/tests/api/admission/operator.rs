//! The operator route changes an account's limits for its next request
//! and is closed to tenant tokens; the usage route reports the limits and
//! what was used.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_domain::AccountLimits;

use crate::app::spawn_live_app;
use crate::support::*;

use super::{
    app_with, assert_refused, generous, limit_in_use, put_limits, rate_left, send, usage, ECHO,
    OPERATOR_KEY,
};

#[sqlx::test(migrations = "../../migrations")]
async fn the_operator_raises_a_limit_and_the_next_call_is_admitted(pool: PgPool) {
    let app = app_with(
        pool,
        AccountLimits {
            concurrent_calls: 0,
            ..generous()
        },
    )
    .await;
    let echo = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    assert_refused(
        app.invoke_response(ACCOUNT_A, &echo, json!({"input": {}}))
            .await,
        "concurrentCalls",
        0,
    )
    .await;
    let raised = put_limits(&app, ACCOUNT_A, json!({"concurrentCalls": 2})).await;
    assert_eq!(raised.status(), 200);
    let view: Value = raised.json().await.unwrap();
    assert_eq!(view["limits"]["concurrentCalls"], 2, "{view}");
    assert_eq!(view["overrides"], json!({"concurrentCalls": 2}), "{view}");
    assert_eq!(view["defaults"]["concurrentCalls"], 0, "{view}");
    assert_eq!(
        app.invoke_response(ACCOUNT_A, &echo, json!({"input": {}}))
            .await
            .status(),
        200
    );
    assert_eq!(
        limit_in_use(&usage(&app, ACCOUNT_A).await, "concurrentCalls"),
        (2, 0)
    );

    let reset = send(
        &app,
        reqwest::Method::DELETE,
        &format!("/operator/accounts/{ACCOUNT_A}/limits"),
        OPERATOR_KEY,
        None,
    )
    .await;
    assert_eq!(reset.status(), 204);
    assert_refused(
        app.invoke_response(ACCOUNT_A, &echo, json!({"input": {}}))
            .await,
        "concurrentCalls",
        0,
    )
    .await;

    let unknown = put_limits(&app, ACCOUNT_A, json!({"concurrentCall": 3})).await;
    assert_eq!(unknown.status(), 400);
    let text = unknown.text().await.unwrap();
    assert!(text.contains("concurrentCall"), "{text}");
    let negative = put_limits(&app, ACCOUNT_A, json!({"concurrentCalls": -1})).await;
    assert_eq!(negative.status(), 400);
    let bad_account = put_limits(&app, "not an account", json!({})).await;
    assert_eq!(bad_account.status(), 422);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_tenant_token_cannot_reach_the_operator_route(pool: PgPool) {
    let app = app_with(pool.clone(), generous()).await;
    let path = format!("/operator/accounts/{ACCOUNT_A}/limits");
    for bearer in [token(ACCOUNT_A), "not-the-operator-key-at-all".to_owned()] {
        let tried = send(
            &app,
            reqwest::Method::PUT,
            &path,
            &bearer,
            Some(json!({"concurrentCalls": 1000})),
        )
        .await;
        assert_eq!(tried.status(), 401);
    }
    let anonymous = app
        .client
        .get(format!("{}{path}", app.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM account_limits")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "nothing was changed");

    let unkeyed = spawn_live_app(pool).await;
    let closed = unkeyed
        .client
        .get(format!("{}{path}", unkeyed.base()))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        closed.status(),
        403,
        "no key configured: the routes are off"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn usage_reports_the_limits_and_what_was_used(pool: PgPool) {
    let app = app_with(
        pool,
        AccountLimits {
            calls_per_minute: 1,
            call_burst: 10,
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
    let used = usage(&app, ACCOUNT_A).await;
    assert_eq!(used["account"], ACCOUNT_A);
    assert_eq!(used["enforced"], true);
    assert_eq!(rate_left(&used, "callsPerMinute"), 7, "{used}");
    assert_eq!(limit_in_use(&used, "concurrentCalls"), (100, 0));
    assert_eq!(limit_in_use(&used, "pendingDetached"), (100, 0));
    assert_eq!(limit_in_use(&used, "mcpTasks"), (100, 0));
    let start = used["period"]["start"].as_str().unwrap();
    assert!(start.ends_with("-01"), "a calendar month: {used}");
    assert!(used["runnerCpuSeconds"].as_f64().is_some(), "{used}");
    assert!(used["egressBytes"].as_u64().is_some(), "{used}");
}
