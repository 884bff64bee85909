//! Stopping a turn: from another connection, or by its client leaving
//! under `onDisconnect: cancel`, and resume and stop scoped by account and
//! agent. Each runs on every chunk store.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::chunk_stores::{on_each_chunk_store, Chunks};
use crate::support::*;

use super::{resume, stop, tool_then_text, types, Frames};

const HANGS: &str = "export default { async execute(ctx) { await new Promise(() => {}); } };";

async fn stop_from_another_connection_ends_the_turn_and_its_runner_call(
    pool: PgPool,
    chunks: Chunks,
) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    let agent = tool_then_text(&app, "stopped", (&tool, "hangs"), json!({}), json!({})).await;
    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-s", "hang"))
            .await,
    );
    first.until("tool-input-available").await;
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 1).await,
        "the call never started"
    );

    // Another account cannot see the agent, so cannot stop its turn.
    let (status, _) = stop(&app, ACCOUNT_B, &agent, "conv-s").await;
    assert_eq!(status, 404);
    let (status, answer) = stop(&app, ACCOUNT_A, &agent, "conv-s").await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["status"], "stopping");

    let chunks = first.read_to_end().await;
    assert_eq!(types(&chunks).last(), Some(&"abort"), "{chunks:?}");
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 0).await,
        "the runner call outlived the stop"
    );
    let (_, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-s",
            ACCOUNT_A,
            None,
        )
        .await;
    let call = &conversation["messages"][1]["parts"][1];
    assert_eq!(call["state"], "output-error", "{conversation}");
    assert_eq!(call["errorText"], "the turn was stopped");
    // Nothing runs any more, and the conversation is free.
    assert_eq!(stop(&app, ACCOUNT_A, &agent, "conv-s").await.0, 204);
    assert_eq!(resume(&app, &agent, "conv-s", "").await.status(), 204);
    app.model.script("stopped", vec![Reply::text("again")]);
    let next = app.say(ACCOUNT_A, &agent, "conv-s", "hello").await;
    assert_eq!(next.status, 200, "{}", next.body);
}

async fn under_on_disconnect_cancel_a_client_that_leaves_stops_the_turn(
    pool: PgPool,
    chunks: Chunks,
) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    let agent = tool_then_text(
        &app,
        "cancel-on-leave",
        (&tool, "hangs"),
        json!({}),
        json!({"onDisconnect": "cancel"}),
    )
    .await;
    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-c", "hang"))
            .await,
    );
    first.until("tool-input-available").await;
    drop(first);
    let mut freed = false;
    for _ in 0..100 {
        if resume(&app, &agent, "conv-c", "").await.status() == 204 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(freed, "the turn went on after its client left");
    assert_eq!(app.inflight(ACCOUNT_A, &tool).await, 0);
}

async fn resume_and_stop_are_scoped_by_account_and_agent(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    app.model.script("plain", vec![Reply::text("hi")]);
    let agent = app.agent(ACCOUNT_A, "plain", json!({})).await;
    let other = app.agent(ACCOUNT_A, "plain", json!({})).await;
    assert_eq!(
        app.say(ACCOUNT_A, &agent, "conv-t", "hello").await.status,
        200
    );
    let foreign = app
        .client
        .get(format!("{}/agents/{agent}/chat/conv-t/stream", app.base()))
        .bearer_auth(token(ACCOUNT_B))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 404);
    let (status, body) = app
        .request(
            reqwest::Method::GET,
            &format!("/agents/{other}/chat/conv-t/stream"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 404, "a conversation of another agent: {body}");
    assert_eq!(stop(&app, ACCOUNT_A, &other, "conv-t").await.0, 404);
    assert_eq!(stop(&app, ACCOUNT_A, "agent_nope", "conv-t").await.0, 404);
}

on_each_chunk_store!(
    stop_from_another_connection_ends_the_turn_and_its_runner_call,
    under_on_disconnect_cancel_a_client_that_leaves_stops_the_turn,
    resume_and_stop_are_scoped_by_account_and_agent,
);
