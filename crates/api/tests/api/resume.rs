//! Turn streams over real HTTP: every chunk recorded before it is shown, a
//! resume that replays the running turn and follows it, `startIndex`, stop
//! from another connection, `onDisconnect`, detached turns followed live,
//! and CORS.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_api::cors::CorsSettings;
use toolserver_api::ApiSettings;
use toolserver_testsupport::Reply;

use crate::app::{fast_lifecycle, spawn_live_app, TestApp};
use crate::chunk_stores::{on_each_chunk_store, Chunks};
use crate::support::*;

const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";
const HANGS: &str = "export default { async execute(ctx) { await new Promise(() => {}); } };";

fn ms_schema() -> Value {
    json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]})
}

/// Reads SSE frames from a response as they come.
struct Frames {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    /// The JSON chunks read so far.
    chunks: Vec<Value>,
    /// Whether `[DONE]` was read.
    done: bool,
}

impl Frames {
    fn new(response: reqwest::Response) -> Self {
        Self {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
            chunks: Vec::new(),
            done: false,
        }
    }

    /// Reads until a chunk of type `kind` has been read (or the end).
    async fn until(&mut self, kind: &str) {
        while !self.chunks.iter().any(|c| c["type"] == kind) && self.read().await {}
    }

    /// Reads to the end of the stream; panics if it does not end with `[DONE]`.
    async fn read_to_end(&mut self) -> Vec<Value> {
        while self.read().await {}
        assert!(
            self.done,
            "the stream ended without [DONE]: {:?}",
            self.chunks
        );
        self.chunks.clone()
    }

    /// Reads one piece; false at the end.
    async fn read(&mut self) -> bool {
        let next = tokio::time::timeout(Duration::from_secs(30), self.body.next())
            .await
            .expect("the stream stalled for 30 s");
        let Some(piece) = next else { return false };
        self.buffer
            .push_str(&String::from_utf8_lossy(&piece.expect("a body piece")));
        while let Some(end) = self.buffer.find("\n\n") {
            let event: String = self.buffer.drain(..end + 2).collect();
            let event = event.trim();
            if event.starts_with(':') || event.is_empty() {
                continue;
            }
            let data = event.strip_prefix("data: ").expect("a data frame");
            assert!(!self.done, "a frame after [DONE]: {data}");
            if data == "[DONE]" {
                self.done = true;
            } else {
                self.chunks
                    .push(serde_json::from_str(data).expect("a JSON chunk"));
            }
        }
        true
    }
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks.iter().map(|c| c["type"].as_str().unwrap()).collect()
}

/// An agent whose turn calls the uploaded tool `tool` named `name` (with
/// `input`) and then answers in text; `extra` adds config fields.
async fn tool_then_text(
    app: &TestApp,
    model: &str,
    (tool, name): (&str, &str),
    input: Value,
    extra: Value,
) -> String {
    app.model.script(
        model,
        vec![
            Reply::tool_call("call_1", name, input),
            Reply::text("all done, thanks for waiting").chunk_delay(Duration::from_millis(20)),
        ],
    );
    let mut config = app.agent_config(model, json!({ tool: {} }));
    for (key, value) in extra.as_object().into_iter().flatten() {
        config[key] = value.clone();
    }
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": model, "config": config})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["agentId"].as_str().unwrap().to_owned()
}

async fn resume(app: &TestApp, agent: &str, conversation: &str, query: &str) -> reqwest::Response {
    app.client
        .get(format!(
            "{}/agents/{agent}/chat/{conversation}/stream{query}",
            app.base()
        ))
        .bearer_auth(token(ACCOUNT_A))
        .send()
        .await
        .unwrap()
}

async fn stop(app: &TestApp, account: &str, agent: &str, conversation: &str) -> (u16, Value) {
    app.request(
        reqwest::Method::POST,
        &format!("/agents/{agent}/chat/{conversation}/stop"),
        account,
        None,
    )
    .await
}

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

#[sqlx::test(migrations = "../../migrations")]
async fn cors_answers_preflights_for_allowed_origins_only(pool: PgPool) {
    let cors = CorsSettings::parse(
        &["http://app.example".to_owned()],
        &["GET".to_owned(), "POST".to_owned()],
        &["authorization".to_owned(), "content-type".to_owned()],
        false,
        Duration::from_secs(600),
    )
    .unwrap();
    let settings = ApiSettings {
        cors,
        ..ApiSettings::default()
    };
    let app = TestApp::live(pool.clone()).api(settings).spawn().await;
    let preflight = |origin: &'static str| {
        app.client
            .request(reqwest::Method::OPTIONS, format!("{}/agents", app.base()))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let allowed = preflight("http://app.example").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "http://app.example"
    );
    let methods = allowed.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(methods.contains("POST"), "{methods}");
    let refused = preflight("http://evil.example").await.unwrap();
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());

    // A real request from the allowed origin can read the stream headers.
    app.model.script("cors", vec![Reply::text("hi")]);
    let agent = app.agent(ACCOUNT_A, "cors", json!({})).await;
    let response = app
        .client
        .post(format!("{}/agents/{agent}/chat", app.base()))
        .bearer_auth(token(ACCOUNT_A))
        .header("origin", "http://app.example")
        .json(&user_turn("conv-cors", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "http://app.example"
    );
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        exposed.contains("x-workflow-stream-tail-index"),
        "{exposed}"
    );
    assert!(!parse_frames(&response.text().await.unwrap()).is_empty());

    // Without CORS settings, no origin is allowed.
    let plain = spawn_live_app(pool).await;
    let preflight = plain
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/agents", plain.base()))
        .header("origin", "http://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(preflight
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

#[sqlx::test(migrations = "../../migrations")]
async fn with_recording_off_turns_stream_straight_and_nothing_is_resumable(pool: PgPool) {
    let mut settings = fast_lifecycle();
    settings.streams.record = false;
    let app = TestApp::live(pool.clone()).harness(settings).spawn().await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    let agent = tool_then_text(
        &app,
        "unrecorded",
        (&tool, "slow"),
        json!({"ms": 500}),
        json!({}),
    )
    .await;
    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-u", "go"))
            .await,
    );
    first.until("tool-input-available").await;
    assert_eq!(resume(&app, &agent, "conv-u", "").await.status(), 204);
    assert_eq!(stop(&app, ACCOUNT_A, &agent, "conv-u").await.0, 204);
    let chunks = first.read_to_end().await;
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM turn_streams")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(recorded, 0);
}

on_each_chunk_store!(
    a_resume_replays_the_running_turn_from_its_start_and_follows_it,
    start_index_resumes_from_a_chunk_and_counts_back_from_the_end,
    a_start_index_past_any_chunk_waits_for_the_turn_to_end,
    stop_from_another_connection_ends_the_turn_and_its_runner_call,
    a_client_that_leaves_does_not_stop_the_turn_and_a_resume_gets_all_of_it,
    under_on_disconnect_cancel_a_client_that_leaves_stops_the_turn,
    a_detached_turn_is_followed_live_from_another_connection,
    resume_and_stop_are_scoped_by_account_and_agent,
);

#[sqlx::test(migrations = "../../migrations")]
async fn under_a_commit_delay_concurrent_turns_are_each_recorded_whole_and_in_order(pool: PgPool) {
    // Every write waits for others to join it: turns share statements.
    let mut settings = fast_lifecycle();
    settings.streams.commit_siblings = 0;
    settings.streams.commit_delay = Duration::from_millis(5);
    let app = TestApp::live(pool).harness(settings).spawn().await;
    app.model.script(
        "grouped",
        vec![Reply::text(&"word ".repeat(30)).chunk_delay(Duration::from_millis(1))],
    );
    let agent = app.agent(ACCOUNT_A, "grouped", json!({})).await;
    let turns = futures::future::join_all((0..8).map(|n| {
        let (app, agent) = (&app, &agent);
        async move {
            let conversation = format!("conv-g{n}");
            let turn = app
                .turn(ACCOUNT_A, agent, user_turn(&conversation, "talk"))
                .await;
            (conversation, turn)
        }
    }))
    .await;
    for (conversation, turn) in turns {
        assert_eq!(turn.status, 200, "{}", turn.body);
        let (recorded, _) = recorded_chunks_and_rows(&app.pool, ACCOUNT_A, &conversation).await;
        assert_eq!(recorded, turn.chunks, "{conversation}");
    }
}

/// The chunks recorded for `account`'s conversation, in order, and in how
/// many batch rows.
async fn recorded_chunks_and_rows(
    pool: &PgPool,
    account: &str,
    conversation: &str,
) -> (Vec<Value>, usize) {
    let batches: Vec<(Vec<String>,)> = sqlx::query_as(
        "SELECT b.chunks FROM turn_stream_batches b JOIN turn_streams s ON s.id = b.stream_id \
         WHERE s.account_id = $1 AND s.conversation_id = $2 ORDER BY b.first_idx",
    )
    .bind(account)
    .bind(conversation)
    .fetch_all(pool)
    .await
    .unwrap();
    let chunks = batches
        .iter()
        .flat_map(|(chunks,)| {
            chunks
                .iter()
                .map(|chunk| serde_json::from_str(chunk).unwrap())
        })
        .collect();
    (chunks, batches.len())
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_recorder_lingers_for_the_rest_of_a_burst_after_its_first_batch_or_when_busy(
    pool: PgPool,
) {
    // One turn at a time; the text comes a chunk per ms. With no siblings
    // needed, every stream counts as a busy server's.
    let mut settings = fast_lifecycle();
    settings.streams.commit_delay = Duration::ZERO;
    let idle = settings.streams.commit_siblings;
    for (linger, siblings, conversation, expected_rows) in [
        (Duration::ZERO, idle, "conv-eager", None),
        (Duration::from_secs(5), idle, "conv-linger", Some(2)),
        (Duration::from_secs(5), 0, "conv-busy", Some(1)),
    ] {
        settings.streams.linger = linger;
        settings.streams.commit_siblings = siblings;
        let app = TestApp::live(pool.clone())
            .harness(settings.clone())
            .spawn()
            .await;
        app.model.script(
            "bursty",
            vec![Reply::text(&"word ".repeat(20)).chunk_delay(Duration::from_millis(1))],
        );
        let agent = app.agent(ACCOUNT_A, "bursty", json!({})).await;
        let turn = app
            .turn(ACCOUNT_A, &agent, user_turn(conversation, "talk"))
            .await;
        assert_eq!(turn.status, 200, "{}", turn.body);
        let (recorded, rows) = recorded_chunks_and_rows(&app.pool, ACCOUNT_A, conversation).await;
        assert_eq!(recorded, turn.chunks, "{conversation}");
        match expected_rows {
            None => assert!(
                rows > 2,
                "without a linger the chunks take many appends: {rows} rows"
            ),
            Some(expected) => assert_eq!(
                rows, expected,
                "{conversation}: idle, the first batch is written at once and the rest lingers into the end's write; busy, the whole turn does"
            ),
        }
    }
}
