//! Admission: each per-account limit refuses at its value with `429` and
//! `Retry-After` (in MCP's and the WebSocket's own forms there), work
//! already admitted passes at any limit, the operator route changes limits
//! for the next request and is closed to tenant tokens, and
//! `GET /accounts/me/usage` reports what was used.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_api::admission::AdmissionSettings;
use toolserver_api::auth::OperatorKey;
use toolserver_api::ApiSettings;
use toolserver_domain::AccountLimits;
use toolserver_testsupport::{tools, Reply};

use crate::app::{spawn_live_app, TestApp};
use crate::detached::wait_for_status;
use crate::support::*;

const OPERATOR_KEY: &str = "operator-key-for-tests";
const ECHO: &str = "export default { execute(ctx, input) { return { echo: input }; } };";
const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

/// Generous limits, so a test reaches only the one it lowers.
fn generous() -> AccountLimits {
    AccountLimits {
        concurrent_calls: 100,
        open_turns: 100,
        pending_detached: 100,
        live_runners: 100,
        mcp_tasks: 100,
        calls_per_minute: 100_000,
        call_burst: 10_000,
        turns_per_minute: 100_000,
        turn_burst: 10_000,
    }
}

async fn app_with(pool: PgPool, limits: AccountLimits) -> TestApp {
    let api = ApiSettings {
        admission: AdmissionSettings {
            enabled: true,
            defaults: limits,
            prompt_refusals: 1000,
            refusal_hold: Duration::ZERO,
        },
        operator_key: Some(OperatorKey::new(OPERATOR_KEY.into()).unwrap()),
        ..ApiSettings::default()
    };
    TestApp::live(pool).api(api).spawn().await
}

/// A raw request as `account` (a tenant token), with its headers.
async fn send(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    bearer: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = app
        .client
        .request(method, format!("{}{path}", app.base()))
        .bearer_auth(bearer);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// Calls `tool` of account A, sleeping `ms`, in a task of its own; its status.
fn invoke_in_background(app: &TestApp, tool: &str, ms: u64) -> tokio::task::JoinHandle<u16> {
    let (client, base, tool) = (app.client.clone(), app.base().to_owned(), tool.to_owned());
    tokio::spawn(async move {
        let body = json!({"input": {"ms": ms}});
        let response = tools::invoke(&client, &base, &token(ACCOUNT_A), &tool, &body).await;
        response.status().as_u16()
    })
}

/// Asserts `response` is a 429 naming `limit` = `value`, with a
/// `Retry-After` of whole seconds; returns the body.
async fn assert_refused(response: reqwest::Response, limit: &str, value: u32) -> Value {
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .expect("a Retry-After header")
        .to_str()
        .unwrap()
        .parse()
        .expect("whole seconds");
    assert!(retry_after >= 1);
    let body: Value = response.json().await.unwrap();
    let error = &body["error"];
    assert_eq!(error["code"], "limit_exceeded", "{body}");
    assert_eq!(error["limit"], limit, "{body}");
    assert_eq!(error["value"], value, "{body}");
    assert!(error["retryAfterMs"].as_u64().is_some(), "{body}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(limit) && message.contains(&value.to_string()),
        "the message names the limit and its value: {message}"
    );
    body
}

async fn put_limits(app: &TestApp, account: &str, overrides: Value) -> reqwest::Response {
    send(
        app,
        reqwest::Method::PUT,
        &format!("/operator/accounts/{account}/limits"),
        OPERATOR_KEY,
        Some(overrides),
    )
    .await
}

async fn usage(app: &TestApp, account: &str) -> Value {
    let (status, body) = app
        .request(reqwest::Method::GET, "/accounts/me/usage", account, None)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

fn limit_in_use(usage: &Value, name: &str) -> (u64, u64) {
    let entry = usage["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {usage}"));
    (
        entry["limit"].as_u64().unwrap(),
        entry["inUse"].as_u64().unwrap(),
    )
}

fn rate_left(usage: &Value, name: &str) -> u64 {
    usage["rates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {usage}"))["remaining"]
        .as_u64()
        .unwrap()
}

/// Polls usage until `name` has `count` in use.
async fn until_in_use(app: &TestApp, account: &str, name: &str, count: u64) {
    for _ in 0..200 {
        if limit_in_use(&usage(app, account).await, name).1 == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{name} never came to {count} in use");
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

#[sqlx::test(migrations = "../../migrations")]
async fn open_turns_and_the_turn_rate_are_refused_at_their_limits(pool: PgPool) {
    let app = app_with(
        pool,
        AccountLimits {
            open_turns: 1,
            ..generous()
        },
    )
    .await;
    app.model.script(
        "held",
        vec![Reply::text("slowly").delay_first(Duration::from_millis(1500))],
    );
    let agent = app.agent(ACCOUNT_A, "held", json!({})).await;
    let held = app
        .start_turn(ACCOUNT_A, &agent, user_turn("conv-held", "hi"))
        .await;
    assert_eq!(held.status(), 200);
    let second = send(
        &app,
        reqwest::Method::POST,
        &format!("/agents/{agent}/chat"),
        &token(ACCOUNT_A),
        Some(user_turn("conv-other", "hi")),
    )
    .await;
    assert_refused(second, "openTurns", 1).await;
    assert_eq!(
        limit_in_use(&usage(&app, ACCOUNT_A).await, "openTurns"),
        (1, 1)
    );
    let text = held.text().await.unwrap();
    assert!(text.contains("slowly"), "the admitted turn ran: {text}");
    until_in_use(&app, ACCOUNT_A, "openTurns", 0).await;

    let raised = put_limits(
        &app,
        ACCOUNT_A,
        json!({"turnsPerMinute": 1, "turnBurst": 1}),
    )
    .await;
    assert_eq!(raised.status(), 200);
    app.model.script("quick", vec![Reply::text("one")]);
    let quick = app.agent(ACCOUNT_A, "quick", json!({})).await;
    let turn = app
        .turn(ACCOUNT_A, &quick, user_turn("conv-q1", "hi"))
        .await;
    assert_eq!(turn.text(), "one");
    let again = send(
        &app,
        reqwest::Method::POST,
        &format!("/agents/{quick}/chat"),
        &token(ACCOUNT_A),
        Some(user_turn("conv-q2", "hi")),
    )
    .await;
    assert_refused(again, "turnsPerMinute", 1).await;
}

/// A detached job that heartbeats, then posts its result a second later.
const JOB: &str = "export default { async execute(ctx, input) { await ctx.asyncTool.heartbeat({ step: 1 }); await new Promise(r => setTimeout(r, 1000)); return { finished: input.job }; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn detached_turns_are_refused_at_their_limit_and_admitted_work_passes_at_any_limit(
    pool: PgPool,
) {
    let app = app_with(
        pool,
        AccountLimits {
            pending_detached: 1,
            ..generous()
        },
    )
    .await;
    let job = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "detached",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a"})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Finished."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "detached", json!({ &job: {"async": true} }))
        .await;
    let (status, accepted) = app
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent}/async"),
            ACCOUNT_A,
            Some(user_turn("conv-a", "go")),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["statusId"].as_str().unwrap().to_owned();
    let second = send(
        &app,
        reqwest::Method::POST,
        &format!("/agents/{agent}/async"),
        &token(ACCOUNT_A),
        Some(user_turn("conv-b", "go")),
    )
    .await;
    assert_refused(second, "pendingDetached", 1).await;

    // Every admission limit at zero: nothing new is admitted, but the
    // running turn's heartbeat, completion and continuation still pass.
    // (`liveRunners` is the runner budget's, not admission's: a turn's tool
    // call waits for a runner like any call.)
    let zero = json!({
        "concurrentCalls": 0, "openTurns": 0, "pendingDetached": 0,
        "mcpTasks": 0, "callsPerMinute": 0, "callBurst": 0, "turnsPerMinute": 0, "turnBurst": 0,
    });
    assert_eq!(put_limits(&app, ACCOUNT_A, zero).await.status(), 200);
    assert_refused(
        app.invoke_response(ACCOUNT_A, &job, json!({"input": {"job": "x"}}))
            .await,
        "callsPerMinute",
        0,
    )
    .await;
    let done = wait_for_status(&app, &id, "completed").await;
    let text = done["messages"].to_string();
    assert!(text.contains("Finished."), "{text}");
    assert!(text.contains("\"finished\":\"a\""), "{text}");
    assert_eq!(app.model.request_count("detached"), 3);
}

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
