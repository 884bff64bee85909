//! Resuming a turn's stream: a resume replays the running turn from its
//! start and follows it, `startIndex` picks where it starts, a client that
//! leaves can resume all of it, and a detached turn is followed live. Each
//! runs on every chunk store.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::app::TestApp;
use crate::chunk_stores::{on_each_chunk_store, Chunks};
use crate::support::*;

use super::{ms_schema, resume, stop, tool_then_text, types, Frames, SLOW};

async fn a_resume_replays_the_running_turn_from_its_start_and_follows_it(
    pool: PgPool,
    chunks: Chunks,
) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    let agent = tool_then_text(
        &app,
        "resume-live",
        (&tool, "slow"),
        json!({"ms": 800}),
        json!({}),
    )
    .await;

    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-r", "go"))
            .await,
    );
    first.until("tool-input-available").await;

    let response = resume(&app, &agent, "conv-r", "").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let tail: i64 = response.headers()["x-workflow-stream-tail-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(tail >= 3, "the tool call was recorded: tail {tail}");
    let resumed = Frames::new(response).read_to_end().await;
    let original = first.read_to_end().await;
    assert_eq!(
        resumed, original,
        "the resume replays exactly what the client saw"
    );
    assert_eq!(resumed[0]["type"], "start");
    assert_eq!(types(&resumed).last(), Some(&"finish"));
    assert!(resumed
        .iter()
        .any(|c| c["type"] == "tool-output-available" && c["output"] == json!({"slept": 800})));

    // Finished: nothing to resume; a conversation that does not exist yet
    // (useChat on a new chat) is the same.
    assert_eq!(resume(&app, &agent, "conv-r", "").await.status(), 204);
    assert_eq!(resume(&app, &agent, "conv-new", "").await.status(), 204);
    chunks.assert_recorded_here(&app.pool).await;
}

async fn start_index_resumes_from_a_chunk_and_counts_back_from_the_end(
    pool: PgPool,
    chunks: Chunks,
) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    let agent = tool_then_text(
        &app,
        "resume-index",
        (&tool, "slow"),
        json!({"ms": 1500}),
        json!({}),
    )
    .await;
    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-i", "go"))
            .await,
    );
    first.until("tool-input-available").await;

    let from_two = resume(&app, &agent, "conv-i", "?startIndex=2").await;
    assert_eq!(from_two.status(), 200);
    let last = resume(&app, &agent, "conv-i", "?startIndex=-1").await;
    let tail: usize = last.headers()["x-workflow-stream-tail-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let original = first.read_to_end().await;
    assert_eq!(Frames::new(from_two).read_to_end().await, original[2..]);
    assert_eq!(Frames::new(last).read_to_end().await, original[tail..]);

    let bad = resume(&app, &agent, "conv-i", "?startIndex=two").await;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("startIndex"),
        "{body}"
    );

    let long = "c".repeat(201);
    let too_long = resume(&app, &agent, &long, "").await;
    assert_eq!(too_long.status(), 400);
    let body: Value = too_long.json().await.unwrap();
    assert_eq!(body["error"]["field"], "conversationId", "{body}");
    let (status, body) = stop(&app, ACCOUNT_A, &agent, &long).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "conversationId", "{body}");
}

/// A `startIndex` past every chunk there can be (the contract allows any
/// 64-bit integer) waits for the turn like one just past the last chunk:
/// the resume sends no chunk and ends with the turn. One beyond 64 bits is
/// a 400 naming the parameter.
async fn a_start_index_past_any_chunk_waits_for_the_turn_to_end(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    let agent = tool_then_text(
        &app,
        "resume-far",
        (&tool, "slow"),
        json!({"ms": 1500}),
        json!({}),
    )
    .await;
    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-far", "go"))
            .await,
    );
    first.until("tool-input-available").await;

    let far = [i64::from(i32::MAX), 1 << 31, i64::MAX].map(|index| {
        let (app, agent) = (&app, &agent);
        async move {
            let query = format!("?startIndex={index}");
            let response = resume(app, agent, "conv-far", &query).await;
            assert_eq!(response.status(), 200, "startIndex={index}");
            let sent = Frames::new(response).read_to_end().await;
            // The model is asked again only once the tool's call ended:
            // a resume that ended before then did not wait for the turn.
            (index, sent, app.model.requests("resume-far").len())
        }
    });
    let (resumed, original) =
        futures::future::join(futures::future::join_all(far), first.read_to_end()).await;
    assert_eq!(types(&original).last(), Some(&"finish"));
    for (index, sent, model_requests) in resumed {
        assert!(sent.is_empty(), "startIndex={index} sent {sent:?}");
        assert_eq!(
            model_requests, 2,
            "startIndex={index}: the resume ended before the turn did"
        );
    }

    for beyond in ["9223372036854775808", "-9223372036854775809"] {
        let response = resume(&app, &agent, "conv-far", &format!("?startIndex={beyond}")).await;
        assert_eq!(response.status(), 400, "startIndex={beyond}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_request", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("startIndex"),
            "{body}"
        );
    }
}

async fn a_client_that_leaves_does_not_stop_the_turn_and_a_resume_gets_all_of_it(
    pool: PgPool,
    chunks: Chunks,
) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    let agent = tool_then_text(&app, "left", (&tool, "slow"), json!({"ms": 600}), json!({})).await;
    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-l", "go"))
            .await,
    );
    first.until("tool-input-available").await;
    let seen = first.chunks.clone();
    drop(first);

    let response = resume(&app, &agent, "conv-l", "").await;
    assert_eq!(response.status(), 200);
    let resumed = Frames::new(response).read_to_end().await;
    assert_eq!(resumed[..seen.len()], seen[..]);
    assert_eq!(types(&resumed).last(), Some(&"finish"));
    let (_, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-l",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(
        conversation["messages"][1]["parts"][1]["output"],
        json!({"slept": 600}),
        "{conversation}"
    );
}

async fn a_detached_turn_is_followed_live_from_another_connection(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    let agent = tool_then_text(
        &app,
        "detached-live",
        (&tool, "slow"),
        json!({"ms": 1500}),
        json!({}),
    )
    .await;
    let (status, accepted) = app
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent}/async"),
            ACCOUNT_A,
            Some(user_turn("conv-d", "go")),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let mut followed = None;
    for _ in 0..100 {
        let response = resume(&app, &agent, "conv-d", "").await;
        if response.status() == 200 {
            followed = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let chunks = Frames::new(followed.expect("the detached turn never streamed"))
        .read_to_end()
        .await;
    assert_eq!(chunks[0]["type"], "start");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "all done, thanks for waiting");
    let status_path = format!("/async/{}", accepted["statusId"].as_str().unwrap());
    let mut status = Value::Null;
    for _ in 0..100 {
        status = app
            .request(reqwest::Method::GET, &status_path, ACCOUNT_A, None)
            .await
            .1;
        if status["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status["status"], "completed", "{status}");
}

on_each_chunk_store!(
    a_resume_replays_the_running_turn_from_its_start_and_follows_it,
    start_index_resumes_from_a_chunk_and_counts_back_from_the_end,
    a_start_index_past_any_chunk_waits_for_the_turn_to_end,
    a_client_that_leaves_does_not_stop_the_turn_and_a_resume_gets_all_of_it,
    a_detached_turn_is_followed_live_from_another_connection,
);
