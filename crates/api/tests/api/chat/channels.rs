//! Chat channels end to end, against a local server speaking each
//! platform's API: Slack (signed Events API callbacks, URL verification,
//! `chat.postMessage` in the thread), Telegram (secret-token webhook,
//! `sendMessage`) and the generic signed webhook. Each checks that a bad
//! signature or a stale timestamp is 401 and runs nothing, that a retried
//! event is answered once, and that answers reach the thread: the first
//! pass's, the late one after a detached tool, a visible denial of a call
//! that needs approval, and one the platform refused twice before taking.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_harness::channels::hmac_hex;
use toolserver_harness::channels::webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use super::with_fast_webhooks;
use crate::app::TestApp;
use crate::stored_shapes::stored_messages;
use crate::support::*;

const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 150)); return { finished: input.job }; } };";

const SIGNING_SECRET: &str = "slack-signing-secret";
const BOT_TOKEN: &str = "xoxb-test-token";

/// One post the platform received.
#[derive(Debug, Clone)]
struct Post {
    path: String,
    headers: HeaderMap,
    body: Value,
    raw: Vec<u8>,
}

/// A local stand-in for the platforms' APIs: keeps every post and refuses
/// the first `refusals` (Slack's way: 200 with `ok: false`).
#[derive(Clone, Default)]
struct Platform {
    posts: Arc<Mutex<Vec<Post>>>,
    refusals: Arc<Mutex<usize>>,
}

impl Platform {
    async fn start() -> (Self, String) {
        let platform = Self::default();
        let app = Router::new()
            .route("/{*path}", post(take))
            .with_state(platform.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (platform, base)
    }

    fn refuse_next(&self, count: usize) {
        *self.refusals.lock().unwrap() = count;
    }

    fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }

    fn texts(&self) -> Vec<String> {
        self.posts()
            .iter()
            .map(|post| post.body["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

async fn take(
    State(platform): State<Platform>,
    Path(path): Path<String>,
    headers: HeaderMap,
    raw: axum::body::Bytes,
) -> Json<Value> {
    platform.posts.lock().unwrap().push(Post {
        path,
        headers,
        body: serde_json::from_slice(&raw).unwrap(),
        raw: raw.to_vec(),
    });
    let mut refusals = platform.refusals.lock().unwrap();
    if *refusals > 0 {
        *refusals -= 1;
        return Json(
            json!({"ok": false, "error": "ratelimited", "description": "Too Many Requests"}),
        );
    }
    Json(json!({"ok": true, "result": {}}))
}

/// Creates an agent on the scripted model `model_id` with `tools` and `channels`.
async fn channel_agent(app: &TestApp, model_id: &str, tools: Value, channels: Value) -> String {
    let mut config = app.agent_config(model_id, tools);
    config["channels"] = channels;
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

fn slack_message(event_id: &str, text: &str, ts: &str) -> String {
    json!({
        "type": "event_callback",
        "team_id": "T1",
        "event_id": event_id,
        "event": {"type": "app_mention", "channel": "C42", "user": "U7", "text": format!("<@U0BOT> {text}"), "ts": ts},
    })
    .to_string()
}

async fn events(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM channel_events")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_slack_thread_is_answered_through_chat_post_message(pool: PgPool) {
    let app = with_fast_webhooks(pool.clone(), 5).await;
    let (platform, base) = Platform::start().await;
    let tool = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    let guarded = app
        .upload(ACCOUNT_A, "refund", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "slack",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a"})),
            Reply::text("Started the job."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("The job finished: a."),
        ],
    );
    let channels = json!({"support": {
        "type": "slack",
        "signingSecret": SIGNING_SECRET,
        "botToken": BOT_TOKEN,
        "apiBaseUrl": format!("{base}/slack/api"),
    }});
    let tools = json!({ &tool: {"async": true}, &guarded: {"needsApproval": true} });
    let agent = channel_agent(&app, "slack", tools, channels).await;
    let path = format!("/channels/{agent}/support");

    // Slack's URL check is answered with its challenge.
    let check =
        json!({"token": "t", "challenge": "ch-123", "type": "url_verification"}).to_string();
    let (status, answer) = deliver(
        &app,
        &path,
        &slack_headers(&check, now(), SIGNING_SECRET),
        &check,
    )
    .await;
    assert_eq!((status, answer), (200, json!({"challenge": "ch-123"})));

    // A wrong signature, a stale timestamp and a missing one are 401 and record nothing.
    let first = slack_message("Ev1", "run the job", "1700000000.000100");
    for headers in [
        slack_headers(&first, now(), "not-the-secret"),
        slack_headers(&first, now() - 301, SIGNING_SECRET),
        vec![("x-slack-signature", "v0=00".to_owned())],
    ] {
        let (status, answer) = deliver(&app, &path, &headers, &first).await;
        assert_eq!(status, 401, "{answer}");
        assert_eq!(answer["error"]["code"], "unauthorized", "{answer}");
    }
    assert_eq!(events(&pool).await, 0);
    let (status, _) = deliver(
        &app,
        &format!("/channels/{agent}/other"),
        &slack_headers(&first, now(), SIGNING_SECRET),
        &first,
    )
    .await;
    assert_eq!(status, 404);

    // The message is taken at once; its retry (same event id) runs nothing new.
    platform.refuse_next(2);
    let (status, taken) = deliver(
        &app,
        &path,
        &slack_headers(&first, now(), SIGNING_SECRET),
        &first,
    )
    .await;
    assert_eq!(status, 200, "{taken}");
    assert!(taken["eventId"].is_string(), "{taken}");
    let (status, retried) = deliver(
        &app,
        &path,
        &slack_headers(&first, now(), SIGNING_SECRET),
        &first,
    )
    .await;
    assert_eq!(
        (status, retried["duplicate"].clone()),
        (200, json!(true)),
        "{retried}"
    );

    until("both answers reach the thread", || async {
        platform
            .texts()
            .iter()
            .filter(|text| text.starts_with("The job"))
            .count()
            == 1
    })
    .await;
    let posts = platform.posts();
    let texts = platform.texts();
    assert_eq!(
        texts,
        [
            "Started the job.",
            "Started the job.",
            "Started the job.",
            "The job finished: a."
        ],
        "the first answer was refused twice, then taken; the late one after it"
    );
    for post in &posts {
        assert_eq!(post.path, "slack/api/chat.postMessage");
        assert_eq!(post.headers["authorization"], format!("Bearer {BOT_TOKEN}"));
        assert_eq!(post.body["channel"], "C42");
        assert_eq!(post.body["thread_ts"], "1700000000.000100");
    }
    let (attempts, delivered, last_error): (i32, i64, Option<String>) = sqlx::query_as(
        "SELECT max(attempts), count(delivered_at), min(last_error) FROM webhook_deliveries WHERE kind = 'channel'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((attempts, delivered, last_error), (3, 2, None));
    assert_eq!(
        app.model.requests("slack").len(),
        3,
        "one turn: launch pass, its answer, one continuation"
    );
    let conversation = format!("{agent}:support:C42:1700000000.000100");
    let stored = stored_messages(&app, &conversation).await;
    assert_eq!(
        stored[0]["parts"][0]["text"], "run the job",
        "the mention is not part of the text"
    );

    // A call that needs a person's approval is denied, visibly, in its own thread.
    app.model.script(
        "slack",
        vec![
            Reply::tool_call("c9", "refund", json!({"job": "r"})),
            Reply::text("I could not refund."),
        ],
    );
    let second = slack_message("Ev2", "refund me", "1700000001.000200");
    let (status, _) = deliver(
        &app,
        &path,
        &slack_headers(&second, now(), SIGNING_SECRET),
        &second,
    )
    .await;
    assert_eq!(status, 200);
    until("the denial reaches its thread", || async {
        platform
            .posts()
            .iter()
            .any(|post| post.body["thread_ts"] == "1700000001.000200")
    })
    .await;
    let denial = platform
        .posts()
        .into_iter()
        .find(|post| post.body["thread_ts"] == "1700000001.000200")
        .unwrap();
    let text = denial.body["text"].as_str().unwrap();
    assert!(
        text.contains(
            "refund needs a person's approval, which cannot be given from this channel yet"
        ) && text.contains("I could not refund."),
        "{text}"
    );
    assert_eq!(events(&pool).await, 2);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_telegram_chat_is_answered_with_send_message(pool: PgPool) {
    let app = with_fast_webhooks(pool.clone(), 5).await;
    let (platform, base) = Platform::start().await;
    app.model
        .script("telegram", vec![Reply::text("Hello from the bot.")]);
    let channels = json!({"support": {
        "type": "telegram",
        "botToken": "123:abc",
        "secretToken": "tg-secret_1",
        "apiBaseUrl": format!("{base}/telegram"),
    }});
    let agent = channel_agent(&app, "telegram", json!({}), channels).await;
    let path = format!("/channels/{agent}/support");
    let update = json!({"update_id": 9001, "message": {
        "message_id": 77, "date": 1700000000, "text": "hi bot",
        "chat": {"id": -100123, "type": "supergroup"}, "from": {"id": 5, "is_bot": false, "first_name": "Ana"},
    }})
    .to_string();

    for secret in [None, Some("wrong")] {
        let headers: Vec<(&str, String)> = secret
            .map(|secret| vec![("x-telegram-bot-api-secret-token", secret.to_owned())])
            .unwrap_or_default();
        let (status, _) = deliver(&app, &path, &headers, &update).await;
        assert_eq!(status, 401);
    }
    assert_eq!(events(&pool).await, 0);

    // The update twice (Telegram's retry), then the next message of the
    // chat at once, while the first turn may still hold the conversation.
    let headers = [("x-telegram-bot-api-secret-token", "tg-secret_1".to_owned())];
    let next = update
        .replace("9001", "9002")
        .replace("77", "78")
        .replace("hi bot", "and again");
    for body in [&update, &update, &next] {
        let (status, answer) = deliver(&app, &path, &headers, body).await;
        assert_eq!(status, 200, "{answer}");
    }
    until("both answers reach the chat", || async {
        platform.posts().len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let posts = platform.posts();
    assert_eq!(posts.len(), 2, "the retried update ran nothing: {posts:?}");
    assert_eq!(posts[0].path, "telegram/bot123:abc/sendMessage");
    assert_eq!(posts[0].body["chat_id"], -100123);
    assert_eq!(posts[0].body["text"], "Hello from the bot.");
    let mut replied: Vec<i64> = posts
        .iter()
        .map(|post| {
            post.body["reply_parameters"]["message_id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    replied.sort();
    assert_eq!(replied, [77, 78]);
    let requests = app.model.requests("telegram");
    assert_eq!(requests.len(), 2);
    let said = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(said, 2, "one conversation for the chat");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_signed_webhook_channel_is_answered_with_a_signed_post(pool: PgPool) {
    let app = with_fast_webhooks(pool.clone(), 5).await;
    let (platform, base) = Platform::start().await;
    app.model
        .script("hook", vec![Reply::text("Answered over the webhook.")]);
    let secret = "shared-secret";
    let channels = json!({"support": {"type": "webhook", "secret": secret, "replyUrl": format!("{base}/hooks/reply")}});
    let agent = channel_agent(&app, "hook", json!({}), channels).await;
    let path = format!("/channels/{agent}/support");
    let event =
        json!({"id": "evt-1", "thread": "ticket-7", "text": "where is my order?"}).to_string();
    let signed = |stamp: i64, key: &str| {
        vec![
            (TIMESTAMP_HEADER, stamp.to_string()),
            (
                SIGNATURE_HEADER,
                format!(
                    "v1={}",
                    hmac_hex(key, format!("{stamp}.{event}").as_bytes())
                ),
            ),
        ]
    };
    for headers in [signed(now(), "other"), signed(now() - 600, secret)] {
        let (status, _) = deliver(&app, &path, &headers, &event).await;
        assert_eq!(status, 401);
    }
    let (status, answer) = deliver(
        &app,
        &path,
        &signed(now(), secret),
        &json!({"id": "x"}).to_string(),
    )
    .await;
    assert_eq!(status, 401, "a signature over another body: {answer}");
    assert_eq!(events(&pool).await, 0);

    let (status, _) = deliver(&app, &path, &signed(now(), secret), &event).await;
    assert_eq!(status, 200);
    until("the answer is posted", || async {
        !platform.posts().is_empty()
    })
    .await;
    let post = &platform.posts()[0];
    assert_eq!(post.path, "hooks/reply");
    assert_eq!(
        (
            post.body["thread"].clone(),
            post.body["inReplyTo"].clone(),
            post.body["text"].clone()
        ),
        (
            json!("ticket-7"),
            json!("evt-1"),
            json!("Answered over the webhook.")
        )
    );
    let stamp = post.headers[TIMESTAMP_HEADER].to_str().unwrap();
    let expected = hmac_hex(
        secret,
        &[format!("{stamp}.").as_bytes(), &post.raw].concat(),
    );
    assert_eq!(
        post.headers[SIGNATURE_HEADER].to_str().unwrap(),
        format!("v1={expected}")
    );
}
