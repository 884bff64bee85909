//! How results reach a detached turn and how it settles: the token checked
//! before the body, NUL in a result or a model's text stored exactly, a
//! NATS requester told of a deleted agent, and the settling run's id on
//! the turn (defects 9 and 10).

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;
use uuid::Uuid;

use crate::app::{spawn_live_app, TestApp};
use crate::chunk_stores::Chunks;
use crate::detached::{next_reply, start_async, wait_for_status};
use crate::support::*;

use super::{async_agent, DELAYED};

#[sqlx::test(migrations = "../../migrations")]
async fn defect9_the_token_is_checked_before_the_body(pool: PgPool) {
    let app = TestApp::live(pool).quiet().spawn().await;
    for route in ["complete", "heartbeat"] {
        let response = app
            .client
            .post(format!(
                "{}/sandbox-jobs/{}/{route}",
                app.base(),
                Uuid::now_v7()
            ))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{route}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "{route}: {body}");
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect9_nul_in_a_completion_is_stored_not_refused(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let source = "export default { async execute() { return { text: 'a\\u0000b' }; } };";
    let (_, agent) = async_agent(
        &app,
        ("nul", source),
        "nul-result",
        json!({}),
        vec![
            Reply::tool_call("c1", "nul", json!({})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Got it."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-nul-result", "go").await;
    let done = wait_for_status(&app, &id, "completed").await;
    let arrived = done["messages"].as_array().unwrap().last().unwrap()["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-async_status")
        .unwrap()
        .clone();
    assert_eq!(arrived["output"]["result"]["text"], "a\u{0}b", "{arrived}");
    let told = app.model.requests("nul-result")[2].to_string();
    assert!(
        told.contains("a\\\\u0000b") || told.contains("a\\u0000b"),
        "{told}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_detached_turn_whose_model_writes_nul_is_stored_exactly(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    app.model
        .script("nul-model", vec![Reply::text("before\u{0}after")]);
    let agent = app.agent(ACCOUNT_A, "nul-model", json!({})).await;
    let id = start_async(&app, &agent, "conv-nul-model", "go").await;
    let done = wait_for_status(&app, &id, "completed").await;
    let parts = done["messages"].as_array().unwrap().last().unwrap()["parts"].clone();
    let text: String = parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "before\u{0}after");
    let (_, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-nul-model",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(conversation["messages"], done["messages"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect10_a_nats_requester_hears_when_the_agent_is_deleted(pool: PgPool) {
    let nats = async_nats::connect("127.0.0.1:4222")
        .await
        .expect("NATS on 127.0.0.1:4222 (make test-deps)");
    let subject = format!("toolserver-test.{}.turns", Uuid::new_v4().simple());
    let app = TestApp::live(pool.clone())
        .nats(nats.clone(), &subject)
        .chunks(Chunks::Nats)
        .spawn()
        .await;
    let (_, agent) = async_agent(
        &app,
        ("job", DELAYED),
        "nats-deleted",
        json!({}),
        vec![
            Reply::tool_call("c1", "job", json!({"name": "slow", "ms": 3000})),
            Reply::text("Started."),
        ],
    )
    .await;
    let inbox = nats.new_inbox();
    let mut replies = nats.subscribe(inbox.clone()).await.unwrap();
    let request = json!({"token": token(ACCOUNT_A), "agentId": agent, "request": user_turn("conv-nats-deleted", "go")});
    nats.publish_with_reply(subject, inbox, serde_json::to_vec(&request).unwrap().into())
        .await
        .unwrap();
    let ack = next_reply(&mut replies).await;
    let id = ack["statusId"].as_str().unwrap().to_owned();
    wait_for_status(&app, &id, "waiting").await;
    let (status, _) = app
        .request(
            reqwest::Method::DELETE,
            &format!("/agents/{agent}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let last = next_reply(&mut replies).await;
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(last["error"], "the agent was deleted", "{last}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn defect10_a_turn_settles_under_the_id_of_the_run_that_ended_it(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let agent = app.agent(ACCOUNT_A, "event-id", json!({})).await;
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    app.model.respond_with("event-id", move |_body, headers| {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        seen.lock().unwrap().push(key);
        Reply::text("Done.")
    });
    let id = start_async(&app, &agent, "conv-event-id", "go").await;
    wait_for_status(&app, &id, "completed").await;
    let event: Uuid = sqlx::query_scalar("SELECT settle_event_id FROM async_turns WHERE id = $1")
        .bind(Uuid::parse_str(&id).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    let keys = keys.lock().unwrap().clone();
    assert_eq!(
        keys,
        vec![Some(format!("{event}.0"))],
        "the model request names the run"
    );
}
