//! Admission: each per-account limit refuses at its value with `429` and
//! `Retry-After` (in MCP's and the WebSocket's own forms there), work
//! already admitted passes at any limit, the operator route changes limits
//! for the next request and is closed to tenant tokens, and
//! `GET /accounts/me/usage` reports what was used. What the modules share:
//! an app with admission on, the refusal check, and the usage report read.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use toolserver_api::admission::AdmissionSettings;
use toolserver_api::auth::OperatorKey;
use toolserver_api::ApiSettings;
use toolserver_domain::AccountLimits;

use crate::app::TestApp;

mod calls;
mod operator;
mod protocols;
mod turns;

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
