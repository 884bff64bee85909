//! Turns that end early: a client disconnect under `onDisconnect: cancel`
//! cancels the runner call, and a failing model or a turn past its time
//! limit ends the stream with an error and frees the conversation.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

const HANGS: &str = "export default { async execute(ctx) { await new Promise(() => {}); } };";

#[sqlx::test(migrations = "../../migrations")]
async fn under_on_disconnect_cancel_a_client_disconnect_cancels_the_runner_call(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    app.model.script(
        "disconnect",
        vec![
            Reply::tool_call("call_h", "hangs", json!({})),
            Reply::text("never"),
        ],
    );
    let mut config = app.agent_config("disconnect", json!({ &tool: {} }));
    config["onDisconnect"] = json!("cancel");
    let (status, created) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "disconnect", "config": config})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agentId"].as_str().unwrap().to_owned();
    let response = app
        .start_turn(ACCOUNT_A, &agent, user_turn("conv-gone", "hang"))
        .await;
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("tool-input-available") {
        seen.push_str(&String::from_utf8_lossy(
            &body.next().await.unwrap().unwrap(),
        ));
    }
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 1).await,
        "the call never started"
    );
    drop(body);
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 0).await,
        "the runner call outlived the client"
    );
    // The conversation is released and records the cut-off call.
    let mut stored = Value::Null;
    for _ in 0..50 {
        let (_, conversation) = app
            .request(
                reqwest::Method::GET,
                "/conversations/conv-gone",
                ACCOUNT_A,
                None,
            )
            .await;
        if conversation["messages"]
            .as_array()
            .is_some_and(|m| m.len() == 2)
        {
            stored = conversation;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        stored["messages"][1]["parts"][1]["state"], "output-error",
        "{stored}"
    );
    assert_eq!(app.model.request_count("disconnect"), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_failing_model_or_an_overlong_turn_ends_the_stream_with_an_error(pool: PgPool) {
    let settings = toolserver_harness::HarnessSettings {
        max_turn_duration: Duration::from_secs(1),
        ..Default::default()
    };
    let app = TestApp::live(pool).harness(settings).spawn().await;
    app.model
        .script("fails", vec![Reply::error(400, "model is overloaded")]);
    let agent = app.agent(ACCOUNT_A, "fails", json!({})).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-fails", "hi").await;
    assert_eq!(turn.status, 200);
    let types = turn.types();
    assert_eq!(
        types,
        ["start", "start-step", "finish-step", "error", "finish"],
        "{:?}",
        turn.chunks
    );
    assert!(turn.of_type("error")[0]["errorText"]
        .as_str()
        .unwrap()
        .contains("model is overloaded"));
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "error");

    app.model.script(
        "slow",
        vec![Reply::text("too slow for the limit").chunk_delay(Duration::from_millis(400))],
    );
    let agent = app.agent(ACCOUNT_A, "slow", json!({})).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-slow", "hi").await;
    assert_eq!(turn.status, 200);
    assert!(
        turn.of_type("error")[0]["errorText"]
            .as_str()
            .unwrap()
            .contains("time limit"),
        "{:?}",
        turn.chunks
    );
    let types = turn.types();
    let mut tail = types[types.len() - 4..].to_vec();
    tail.dedup();
    assert_eq!(
        tail,
        ["text-end", "finish-step", "error", "finish"],
        "the open text and step are closed first: {types:?}"
    );
    // The conversation was stored and released: the next turn runs.
    app.model.script("slow", vec![Reply::text("quick")]);
    let next = app.say(ACCOUNT_A, &agent, "conv-slow", "again").await;
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(next.text(), "quick");
}
