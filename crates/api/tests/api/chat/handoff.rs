//! The `handoff` tool end to end: the model hands a conversation to people,
//! the announcement reaches the agent's webhook (after the receiver failed
//! twice), the conversation's turns (streamed and detached) are answered
//! with the held message without the model, and a person's release gives it
//! back to the agent. A
//! receiver that never answers 2xx leaves the announcement recorded as
//! failed, with its last error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use super::with_fast_webhooks;
use crate::app::TestApp;
use crate::detached::{start_async, wait_for_status};
use crate::support::*;

/// A webhook receiver that answers the first `failures` posts 500, the rest
/// 200, and keeps every post.
#[derive(Clone, Default)]
struct Receiver {
    posts: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    failures: usize,
}

impl Receiver {
    async fn start(failures: usize) -> (Self, String) {
        let receiver = Self {
            failures,
            ..Self::default()
        };
        let app = Router::new()
            .route("/hooks/handoff", post(take))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/handoff", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    fn posts(&self) -> Vec<(HeaderMap, Value)> {
        self.posts.lock().unwrap().clone()
    }
}

async fn take(
    State(receiver): State<Receiver>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> StatusCode {
    let mut posts = receiver.posts.lock().unwrap();
    posts.push((headers, body));
    if posts.len() <= receiver.failures {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

async fn conversation(app: &TestApp, id: &str) -> Value {
    let path = format!("/conversations/{id}");
    let (status, body) = app
        .request(reqwest::Method::GET, &path, ACCOUNT_A, None)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_handoff_holds_the_conversation_until_a_person_releases_it(pool: PgPool) {
    let app = with_fast_webhooks(pool, 4).await;
    let (receiver, url) = Receiver::start(2).await;
    app.model.script(
        "handoff",
        vec![
            Reply::tool_call(
                "call_h",
                "handoff",
                json!({"reason": "billing dispute", "summary": "wants a refund"}),
            ),
            Reply::text("A person will follow up."),
        ],
    );
    let tools = json!({"handoff": {"webhookUrl": url, "heldMessage": "Ana will answer soon.", "staff": ["ana"]}});
    let agent = app.agent(ACCOUNT_A, "handoff", tools).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-h", "refund me").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs[0]["output"]["handedOff"], true, "{}", turn.body);
    assert_eq!(outputs[0]["output"]["announced"], true);
    assert_eq!(turn.text(), "A person will follow up.");
    let specs = &app.model.requests("handoff")[0]["tools"];
    assert_eq!(specs[0]["function"]["name"], "handoff", "{specs}");

    until(
        "the announcement is delivered on the third attempt",
        || async {
            conversation(&app, "conv-h").await["handoff"]["announcement"]["status"] == "delivered"
        },
    )
    .await;
    let view = conversation(&app, "conv-h").await;
    let handoff = &view["handoff"];
    assert_eq!(handoff["reason"], "billing dispute");
    assert_eq!(handoff["summary"], "wants a refund");
    assert_eq!(handoff["toolCallId"], "call_h");
    assert_eq!(handoff["announcement"]["attempts"], 3, "{handoff}");
    assert_eq!(handoff["announcement"]["lastError"], Value::Null);
    let posts = receiver.posts();
    assert_eq!(posts.len(), 3);
    let delivery = handoff["announcement"]["deliveryId"].as_str().unwrap();
    for (headers, body) in &posts {
        assert_eq!(headers["idempotency-key"], delivery);
        assert_eq!(body, &posts[0].1, "every attempt posts the same body");
    }
    let body = &posts[0].1;
    assert_eq!(body["type"], "conversation.handoff");
    assert_eq!(body["deliveryId"], delivery);
    assert_eq!(body["conversationId"], "conv-h");
    assert_eq!(body["agentId"], agent.as_str());
    assert_eq!(body["staff"], json!(["ana"]));
    assert_eq!(body["reason"], "billing dispute");
    let link = body["link"].as_str().unwrap();
    assert!(link.ends_with("/conversations/conv-h"), "{link}");
    assert_eq!(body["releaseUrl"], format!("{link}/release"));
    assert_eq!(
        body["text"],
        format!("Conversation conv-h was handed to people: billing dispute. Summary: wants a refund. For: ana. {link}"),
        "a chat's incoming webhook posts `text`"
    );

    // While it is with people, turns get the held message and the model is
    // not asked.
    let held = app.say(ACCOUNT_A, &agent, "conv-h", "hello?").await;
    assert_eq!(held.status, 200, "{}", held.body);
    assert_eq!(held.text(), "Ana will answer soon.");
    assert_eq!(app.model.request_count("handoff"), 2);
    let detached = start_async(&app, &agent, "conv-h", "still there?").await;
    wait_for_status(&app, &detached, "completed").await;
    let messages = conversation(&app, "conv-h").await["messages"].clone();
    let last = messages.as_array().unwrap().last().unwrap();
    assert_eq!(
        last["parts"][1]["text"], "Ana will answer soon.",
        "a detached turn is held too: {last}"
    );
    assert_eq!(app.model.request_count("handoff"), 2);

    // Another account cannot release it; its account can, once.
    let release = "/conversations/conv-h/release";
    let (status, _) = app
        .request(reqwest::Method::POST, release, ACCOUNT_B, None)
        .await;
    assert_eq!(status, 404);
    let (status, body) = app
        .request(reqwest::Method::POST, release, ACCOUNT_A, None)
        .await;
    assert_eq!((status, &body["released"]), (200, &json!(true)), "{body}");
    let (status, body) = app
        .request(reqwest::Method::POST, release, ACCOUNT_A, None)
        .await;
    assert_eq!((status, &body["released"]), (200, &json!(false)), "{body}");
    assert_eq!(conversation(&app, "conv-h").await["handoff"], Value::Null);

    app.model
        .script("handoff", vec![Reply::text("Back with the agent.")]);
    let back = app.say(ACCOUNT_A, &agent, "conv-h", "thanks").await;
    assert_eq!(back.text(), "Back with the agent.");
    assert_eq!(app.model.request_count("handoff"), 3);
    let (status, _) = app
        .request(
            reqwest::Method::POST,
            "/conversations/nowhere/release",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_announcement_no_receiver_takes_is_recorded_as_failed(pool: PgPool) {
    let app = with_fast_webhooks(pool, 4).await;
    let (receiver, url) = Receiver::start(usize::MAX).await;
    app.model.script(
        "refused",
        vec![
            Reply::tool_call("call_r", "handoff", json!({"reason": "stuck"})),
            Reply::text("Someone will help."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "refused",
            json!({"handoff": {"webhookUrl": url}}),
        )
        .await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-r", "help").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    until("the announcement runs out of attempts", || async {
        conversation(&app, "conv-r").await["handoff"]["announcement"]["status"] == "failed"
    })
    .await;
    let announcement = &conversation(&app, "conv-r").await["handoff"]["announcement"];
    assert_eq!(announcement["attempts"], 4, "{announcement}");
    assert!(
        announcement["lastError"].as_str().unwrap().contains("500"),
        "{announcement}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        receiver.posts().len(),
        4,
        "nothing is tried after the last attempt"
    );

    // Without a webhook the handoff still holds the conversation, with the
    // default held message.
    app.model.script(
        "quiet",
        vec![
            Reply::tool_call("call_q", "handoff", json!({"reason": "asked for a person"})),
            Reply::text("A person will answer."),
        ],
    );
    let quiet = app.agent(ACCOUNT_A, "quiet", json!({"handoff": {}})).await;
    let turn = app
        .say(ACCOUNT_A, &quiet, "conv-q", "a person please")
        .await;
    assert_eq!(
        turn.of_type("tool-output-available")[0]["output"]["announced"],
        false
    );
    let held = app.say(ACCOUNT_A, &quiet, "conv-q", "hi").await;
    assert_eq!(
        held.text(),
        toolserver_harness::handoff::DEFAULT_HELD_MESSAGE
    );
    assert_eq!(
        conversation(&app, "conv-q").await["handoff"]["announcement"],
        Value::Null
    );
}
