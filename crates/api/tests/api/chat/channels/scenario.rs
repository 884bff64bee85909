//! The scenario every channel type passes, whatever its platform.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use super::platform::{Platform, Post};
use super::*;
use crate::chat::with_fast_webhooks;

const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 150)); return { finished: input.job }; } };";

/// A channel type as the scenario drives it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Slack,
    Telegram,
    Webhook,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Slack => "slack",
            Self::Telegram => "telegram",
            Self::Webhook => "webhook",
        }
    }

    /// The channel's config, its API on the local platform at `base`.
    fn channel(self, base: &str) -> Value {
        match self {
            Self::Slack => {
                json!({"type": "slack", "signingSecret": SIGNING_SECRET, "botToken": BOT_TOKEN, "apiBaseUrl": format!("{base}/slack/api")})
            }
            Self::Telegram => {
                json!({"type": "telegram", "botToken": "123:abc", "secretToken": TELEGRAM_SECRET, "apiBaseUrl": format!("{base}/telegram")})
            }
            Self::Webhook => {
                json!({"type": "webhook", "secret": WEBHOOK_SECRET, "replyUrl": format!("{base}/hooks/reply")})
            }
        }
    }

    /// Event number `key` opening thread number `thread`, saying `text`.
    fn event(self, key: u32, thread: u32, text: &str) -> String {
        match self {
            Self::Slack => json!({
                "type": "event_callback", "team_id": "T1", "event_id": format!("Ev{key}"),
                "event": {"type": "message", "channel": "C42", "user": "U7", "text": text, "ts": slack_ts(thread)},
            }),
            Self::Telegram => json!({"update_id": key, "message": {
                "message_id": key, "date": 1700000000, "text": text,
                "chat": {"id": telegram_chat(thread), "type": "private"}, "from": {"id": 5, "is_bot": false},
            }}),
            Self::Webhook => json!({"id": format!("evt-{key}"), "thread": format!("t{thread}"), "text": text}),
        }
        .to_string()
    }

    /// The headers that authenticate `body`.
    fn signed(self, body: &str) -> Vec<(&'static str, String)> {
        match self {
            Self::Slack => slack_headers(body, now(), SIGNING_SECRET),
            Self::Telegram => telegram_headers(TELEGRAM_SECRET),
            Self::Webhook => webhook_headers(body, now(), WEBHOOK_SECRET),
        }
    }

    /// Headers that must not authenticate `body`: another secret, a stale
    /// timestamp, a signature over another body, none.
    fn forged(self, body: &str) -> Vec<Vec<(&'static str, String)>> {
        match self {
            Self::Slack => vec![
                slack_headers(body, now(), "not-the-secret"),
                slack_headers(body, now() - 301, SIGNING_SECRET),
                slack_headers("{}", now(), SIGNING_SECRET),
                vec![("x-slack-signature", "v0=00".to_owned())],
            ],
            Self::Telegram => vec![telegram_headers("not-the-secret"), Vec::new()],
            Self::Webhook => vec![
                webhook_headers(body, now(), "not-the-secret"),
                webhook_headers(body, now() - 600, WEBHOOK_SECRET),
                webhook_headers("{}", now(), WEBHOOK_SECRET),
                Vec::new(),
            ],
        }
    }

    /// The thread number a post went to.
    fn thread_of(self, post: &Post) -> u32 {
        (1..=9)
            .find(|thread| match self {
                Self::Slack => post.body["thread_ts"] == slack_ts(*thread),
                Self::Telegram => post.body["chat_id"] == telegram_chat(*thread),
                Self::Webhook => post.body["thread"] == format!("t{thread}"),
            })
            .unwrap_or_else(|| panic!("a post to no thread: {post:?}"))
    }

    /// The conversation of thread number `thread`.
    fn conversation(self, agent: &str, thread: u32) -> String {
        match self {
            Self::Slack => format!("{agent}:support:C42:{}", slack_ts(thread)),
            Self::Telegram => format!("{agent}:support:{}", telegram_chat(thread)),
            Self::Webhook => format!("{agent}:support:t{thread}"),
        }
    }
}

fn slack_ts(thread: u32) -> String {
    format!("17000000{thread:02}.000100")
}

fn telegram_chat(thread: u32) -> i64 {
    -100 - i64::from(thread)
}

/// The texts posted to thread number `thread`, in order.
fn texts(platform: &Platform, kind: Kind, thread: u32) -> Vec<String> {
    platform
        .posts()
        .iter()
        .filter(|post| kind.thread_of(post) == thread)
        .map(|post| post.text().to_owned())
        .collect()
}

async fn scenario(pool: PgPool, kind: Kind) {
    let app = with_fast_webhooks(pool.clone(), 5).await;
    let (platform, base) = Platform::start().await;
    let job = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    let refund = app
        .upload(ACCOUNT_A, "refund", JOB, json!({"type": "object"}))
        .await;
    let model = kind.name();
    app.model.script(
        model,
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a"})),
            Reply::text("Started the job."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("The job finished: a."),
        ],
    );
    let tools = json!({ &job: {"async": true}, &refund: {"needsApproval": true} });
    let agent = channel_agent(&app, model, tools, kind.channel(&base)).await;
    let path = format!("/channels/{agent}/support");

    // Forged requests are 401 and record nothing.
    let first = kind.event(1, 1, "run the job");
    for headers in kind.forged(&first) {
        let (status, answer) = deliver(&app, &path, &headers, &first).await;
        assert_eq!(status, 401, "{kind:?} {headers:?}: {answer}");
        assert_eq!(answer["error"]["code"], "unauthorized", "{answer}");
    }
    assert_eq!(events(&pool).await, 0);

    // The message is taken at once; its retry runs nothing new. The first
    // answer is refused twice, then taken; the late result follows it.
    platform.refuse_next(2);
    let (status, taken) = deliver(&app, &path, &kind.signed(&first), &first).await;
    assert_eq!(status, 200, "{taken}");
    assert!(taken["eventId"].is_string(), "{taken}");
    let (status, retried) = deliver(&app, &path, &kind.signed(&first), &first).await;
    assert_eq!(
        (status, &retried["duplicate"]),
        (200, &json!(true)),
        "{retried}"
    );
    until("the late answer reaches the thread", || async {
        texts(&platform, kind, 1).last().map(String::as_str) == Some("The job finished: a.")
    })
    .await;
    assert_eq!(
        texts(&platform, kind, 1),
        [
            "Started the job.",
            "Started the job.",
            "Started the job.",
            "The job finished: a."
        ],
        "{kind:?}: the first answer refused twice, then taken; the late one after it"
    );
    assert_eq!(
        app.model.requests(model).len(),
        3,
        "one turn: its pass, its answer, one continuation"
    );
    // The platform has both posts; the server records a post as delivered
    // once the platform's answer is back, a moment later.
    let mut read = conversation(&app, &kind.conversation(&agent, 1)).await;
    for _ in 0..200 {
        let pending = read["channelReplies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|reply| reply["status"] == "pending");
        if !pending {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        read = conversation(&app, &kind.conversation(&agent, 1)).await;
    }
    let replies: Vec<(&str, i64)> = read["channelReplies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|reply| {
            (
                reply["status"].as_str().unwrap(),
                reply["attempts"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        replies,
        [("delivered", 1), ("delivered", 3)],
        "newest first: {read}"
    );
    assert_eq!(read["messages"][0]["parts"][0]["text"], "run the job");

    // A call that needs a person's approval is denied, visibly, in its thread.
    app.model.script(
        model,
        vec![
            Reply::tool_call("c9", "refund", json!({"job": "r"})),
            Reply::text("I could not refund."),
        ],
    );
    let second = kind.event(2, 2, "refund me");
    let (status, _) = deliver(&app, &path, &kind.signed(&second), &second).await;
    assert_eq!(status, 200);
    until("the denial reaches its thread", || async {
        !texts(&platform, kind, 2).is_empty()
    })
    .await;
    let denial = texts(&platform, kind, 2).remove(0);
    assert!(
        denial.contains(
            "refund needs a person's approval, which cannot be given from this channel yet"
        ) && denial.contains("I could not refund."),
        "{denial}"
    );
    assert_eq!(events(&pool).await, 2);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_slack_channel_answers_late_results_denials_and_refused_posts(pool: PgPool) {
    scenario(pool, Kind::Slack).await;
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_telegram_channel_answers_late_results_denials_and_refused_posts(pool: PgPool) {
    scenario(pool, Kind::Telegram).await;
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_webhook_channel_answers_late_results_denials_and_refused_posts(pool: PgPool) {
    scenario(pool, Kind::Webhook).await;
}
