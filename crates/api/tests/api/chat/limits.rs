//! Limits on turns: step and conversation limits as stream errors or 4xx
//! answers, and one turn at a time per conversation, with a dead turn's
//! lease freeing it once it expires.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::support::*;

use super::{q_schema, ECHO};

#[sqlx::test(migrations = "../../migrations")]
async fn limits_are_errors_on_the_stream_or_4xx_before_it(pool: PgPool) {
    let settings = toolserver_harness::HarnessSettings {
        max_conversation_messages: 3,
        ..Default::default()
    };
    let app = TestApp::live(pool).harness(settings).spawn().await;
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    let looping: Vec<Reply> = (0..3)
        .map(|i| Reply::tool_call(&format!("call_{i}"), "echo", json!({"q": "again"})))
        .collect();
    app.model.script("limits", looping);
    let mut config = app.agent_config("limits", json!({ &tool: {} }));
    config["maxSteps"] = json!(2);
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "l", "config": config})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let agent = body["agentId"].as_str().unwrap().to_owned();
    let turn = app.say(ACCOUNT_A, &agent, "conv-limits", "loop").await;
    assert_eq!(turn.status, 200);
    assert!(
        turn.of_type("error")[0]["errorText"]
            .as_str()
            .unwrap()
            .contains("step limit of 2"),
        "{:?}",
        turn.chunks
    );
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "error");
    assert_eq!(app.model.request_count("limits"), 2);
    // Two stored messages plus a new user message and its answer exceed three.
    let second = app.say(ACCOUNT_A, &agent, "conv-limits", "more").await;
    assert_eq!(second.status, 413, "{}", second.body);
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent}/chat"),
            ACCOUNT_A,
            Some(json!({"id": "", "messages": [], "trigger": "submit-message"})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("id")),
        "{body}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn one_turn_at_a_time_and_a_dead_turn_frees_its_conversation(pool: PgPool) {
    let settings = toolserver_harness::HarnessSettings {
        turn_lease: Duration::from_secs(3),
        ..Default::default()
    };
    let app = TestApp::live(pool.clone()).harness(settings).spawn().await;
    app.model.script(
        "busy",
        vec![Reply::text("slow").delay_first(Duration::from_secs(5))],
    );
    let agent = app.agent(ACCOUNT_A, "busy", json!({})).await;
    let running = app
        .start_turn(ACCOUNT_A, &agent, user_turn("conv-busy", "first"))
        .await;
    assert_eq!(running.status(), 200);
    let second = app.say(ACCOUNT_A, &agent, "conv-busy", "second").await;
    assert_eq!(second.status, 409, "{}", second.body);
    assert_eq!(second.json()["error"]["code"], "conversation_busy");
    // Past the lease's length the running turn still holds it: it renews.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let third = app.say(ACCOUNT_A, &agent, "conv-busy", "third").await;
    assert_eq!(third.status, 409, "{}", third.body);
    let body = running.text().await.unwrap();
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");

    // A conversation belongs to one agent.
    let other = app.agent(ACCOUNT_A, "busy", json!({})).await;
    let wrong = app.say(ACCOUNT_A, &other, "conv-busy", "hi").await;
    assert_eq!(wrong.json()["error"]["code"], "conversation_of_other_agent");

    // A turn that died holding a lease (never renewed) frees it once it expires.
    let account = toolserver_domain::AccountId::parse(ACCOUNT_A).unwrap();
    let agent_id = toolserver_domain::AgentId::parse(&agent).unwrap();
    toolserver_store::conversations::begin_turn(
        &mut pool.acquire().await.unwrap(),
        &account,
        "conv-dead",
        agent_id,
        toolserver_store::conversations::LeaseTerms {
            holder: uuid::Uuid::now_v7(),
            process: uuid::Uuid::now_v7(),
            lease: Duration::from_secs(1),
        },
        toolserver_store::conversations::Known::default(),
    )
    .await
    .unwrap();
    app.model.script("busy", vec![Reply::text("back")]);
    assert_eq!(
        app.say(ACCOUNT_A, &agent, "conv-dead", "hi").await.status,
        409
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let revived = app.say(ACCOUNT_A, &agent, "conv-dead", "hi").await;
    assert_eq!(revived.status, 200, "{}", revived.body);
    assert_eq!(revived.text(), "back");
}
