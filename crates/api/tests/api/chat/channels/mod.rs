//! Chat channels end to end, against a local server speaking each
//! platform's API: Slack (signed Events API callbacks, `chat.postMessage`
//! in the thread), Telegram (secret-token webhook, `sendMessage`) and the
//! generic signed webhook. One scenario runs on each ([`scenario`]): a bad
//! signature or a stale timestamp is 401 and runs nothing, a retried event
//! is answered once, the first answer is refused twice and then taken, a
//! detached tool's late result follows it into the thread, and a call that
//! needs approval is denied with a visible message. Each platform's own
//! modules check what only it has (Slack's URL check, Telegram's busy chat,
//! the webhook's signed answer). A call that needs a connection shows the
//! link to make it (`connection`).

mod connection;
mod platform;
mod scenario;
mod slack;
mod telegram;
mod webhook;

use serde_json::Value;
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_harness::channels::hmac_hex;
use toolserver_harness::channels::webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER};

use crate::app::TestApp;
use crate::support::*;

const SIGNING_SECRET: &str = "slack-signing-secret";
const BOT_TOKEN: &str = "xoxb-test-token";
const TELEGRAM_SECRET: &str = "tg-secret_1";
const WEBHOOK_SECRET: &str = "shared-secret";

/// Creates an agent on the scripted model `model_id` with `tools` and the
/// channel `support`; its id. The channel's secrets read back redacted.
async fn channel_agent(app: &TestApp, model_id: &str, tools: Value, channel: Value) -> String {
    let mut config = app.agent_config(model_id, tools);
    config["channels"] = serde_json::json!({ "support": channel });
    let body = app.agent_with_config(ACCOUNT_A, model_id, config).await;
    let shown = body["config"]["channels"]["support"].as_object().unwrap();
    for field in ["signingSecret", "botToken", "secretToken", "secret"] {
        if let Some(value) = shown.get(field) {
            assert_eq!(value, "[redacted]", "{body}");
        }
    }
    body["agentId"].as_str().unwrap().to_owned()
}

fn now() -> i64 {
    OffsetDateTime::now_utc().unix_timestamp()
}

/// Posts `body` to a channel's route with `headers`; status and answer.
async fn deliver(
    app: &TestApp,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, Value) {
    let mut request = app
        .client
        .post(format!("{}{path}", app.base()))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Slack's headers for `body` sent at `stamp`, signed with `secret`.
fn slack_headers(body: &str, stamp: i64, secret: &str) -> Vec<(&'static str, String)> {
    let signature = hmac_hex(secret, format!("v0:{stamp}:{body}").as_bytes());
    vec![
        ("x-slack-request-timestamp", stamp.to_string()),
        ("x-slack-signature", format!("v0={signature}")),
    ]
}

/// A webhook channel's headers for `body` sent at `stamp`, signed with `secret`.
fn webhook_headers(body: &str, stamp: i64, secret: &str) -> Vec<(&'static str, String)> {
    let signature = hmac_hex(secret, format!("{stamp}.{body}").as_bytes());
    vec![
        (TIMESTAMP_HEADER, stamp.to_string()),
        (SIGNATURE_HEADER, format!("v1={signature}")),
    ]
}

/// Telegram's header carrying `secret`.
fn telegram_headers(secret: &str) -> Vec<(&'static str, String)> {
    vec![("x-telegram-bot-api-secret-token", secret.to_owned())]
}

/// How many channel events are recorded.
async fn events(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM channel_events")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The conversation `id`, as `GET /conversations/{id}` shows it.
async fn conversation(app: &TestApp, id: &str) -> Value {
    let (status, read) = app
        .request(
            reqwest::Method::GET,
            &format!("/conversations/{id}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200, "{read}");
    read
}
