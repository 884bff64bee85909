//! Every kind of conversation the server stores is one the AI SDK accepts.
//! Each shape is produced through the running server and read back with
//! `GET /conversations/{id}`; the published `ai` package's own
//! `safeValidateUIMessages` (6.x and 7.x) then checks all of them in
//! `clients/ai-sdk/test/stored.test.mjs`. A new shape is one more entry in
//! the list of `every_stored_conversation_shape_passes_the_ai_sdk_validator`.
//!
//! Also here: what a failed or stopped streaming call keeps of its
//! preliminary outputs, and conversations stored by earlier releases.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::clients::client_dir;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::detached::{start_async, wait_for_status};
use crate::support::*;

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";
const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 100)); return { finished: input.job }; } };";
const YIELDS_THEN_HANGS: &str =
    "export default { async *execute() { yield { step: 1 }; await new Promise(() => {}); } };";
const FAILS_AFTER_YIELDING: &str = "export default { async *execute() { yield { step: 1 }; yield { step: 2 }; throw new Error('broke after two steps'); } };";

/// What the failing tool's error part says: its error, then what it
/// yielded last.
const FAILED_AFTER_YIELDING: &str =
    "Error: broke after two steps; its last output before that was {\"step\":2}";

fn schema(property: &str) -> Value {
    json!({"type": "object", "properties": {property: {"type": "string"}}, "required": [property]})
}

/// One stored conversation to validate: what produced it, and its messages.
struct Shape {
    name: &'static str,
    messages: Value,
}

async fn stored_messages(app: &TestApp, conversation: &str) -> Value {
    let (status, body) = app
        .request(
            reqwest::Method::GET,
            &format!("/conversations/{conversation}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["messages"].clone()
}

/// The tool parts of the conversation's messages, in order.
fn tool_parts(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().clone())
        .filter(|p| p["type"].as_str().unwrap().starts_with("tool-"))
        .collect()
}

/// A chat turn whose model calls the tool `echo` and then answers.
async fn chat_with_a_tool_call(app: &TestApp, echo: &str) -> Value {
    app.model.script(
        "stored-chat",
        vec![
            Reply::tool_call("c1", "echo", json!({"q": "x"})),
            Reply::text("Echoed."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "stored-chat", json!({ echo: {} }))
        .await;
    let turn = app.say(ACCOUNT_A, &agent, "stored-chat", "echo x").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let messages = stored_messages(app, "stored-chat").await;
    assert_eq!(tool_parts(&messages)[0]["state"], "output-available");
    messages
}

/// A Gemini turn whose call carries a thought signature and whose answer
/// is grounded on sources.
async fn gemini_with_a_signed_call_and_sources(app: &TestApp, echo: &str) -> Value {
    app.model.script(
        "stored-gemini",
        vec![
            Reply::tool_call("g1", "echo", json!({"q": "x"})),
            Reply::text("Grounded.").and_source("https://a.example/", "A"),
        ],
    );
    let config = json!({
        "model": {"provider": "google", "modelId": "stored-gemini"},
        "provider": {"google": {"apiKey": "k", "baseUrl": app.model.gemini_base_url()}},
        "tools": {echo: {}, "googleSearch": {}},
    });
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "stored-gemini", "config": config})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let agent = body["agentId"].as_str().unwrap();
    let turn = app.say(ACCOUNT_A, agent, "stored-gemini", "echo x").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let messages = stored_messages(app, "stored-gemini").await;
    assert!(tool_parts(&messages)[0]["callProviderMetadata"].is_object());
    messages
}

/// A detached (`/async`) turn whose async call completed and was continued.
async fn detached_with_a_completed_call(app: &TestApp) -> Value {
    let job = app.upload(ACCOUNT_A, "job", JOB, schema("job")).await;
    app.model.script(
        "stored-detached",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "d"})),
            Reply::text("Job started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Job finished."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "stored-detached",
            json!({ &job: {"async": true} }),
        )
        .await;
    let id = start_async(app, &agent, "stored-detached", "run the job").await;
    wait_for_status(app, &id, "completed").await;
    let messages = stored_messages(app, "stored-detached").await;
    let states: Vec<Value> = tool_parts(&messages)
        .iter()
        .map(|p| json!([p["type"], p["state"]]))
        .collect();
    assert_eq!(
        states,
        [
            json!(["tool-job", "output-available"]),
            json!(["tool-async_status", "output-available"])
        ],
        "{messages}"
    );
    messages
}

/// A turn stopped (`POST …/stop`) while its streaming tool runs, after the
/// tool yielded once.
async fn stopped_mid_tool(app: &TestApp) -> Value {
    let hangs = app
        .upload(
            ACCOUNT_A,
            "hangs",
            YIELDS_THEN_HANGS,
            json!({"type": "object"}),
        )
        .await;
    app.model.script(
        "stored-stopped",
        vec![
            Reply::tool_call("c1", "hangs", json!({})),
            Reply::text("unused"),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "stored-stopped", json!({ &hangs: {} }))
        .await;
    let response = app
        .start_turn(ACCOUNT_A, &agent, user_turn("stored-stopped", "go"))
        .await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("\"preliminary\":true") {
        let piece = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the tool did not yield within 30 s")
            .unwrap_or_else(|| panic!("the turn ended before its tool yielded: {seen}"));
        seen.push_str(&String::from_utf8_lossy(&piece.unwrap()));
    }
    let (status, answer) = app
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent}/chat/stored-stopped/stop"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    while let Some(piece) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&piece.unwrap()));
    }
    let chunks = parse_frames(&seen);
    assert_eq!(chunks.last().unwrap()["type"], "abort", "{seen}");
    let messages = stored_messages(app, "stored-stopped").await;
    assert_eq!(tool_parts(&messages)[0]["state"], "output-error");
    messages
}

/// An agent whose tool yields twice and then throws.
async fn failing_agent(app: &TestApp) -> String {
    let failing = app
        .upload(
            ACCOUNT_A,
            "failing",
            FAILS_AFTER_YIELDING,
            json!({"type": "object"}),
        )
        .await;
    app.model.script(
        "stored-failed",
        vec![
            Reply::tool_call("c1", "failing", json!({})),
            Reply::text("It broke."),
        ],
    );
    app.agent(ACCOUNT_A, "stored-failed", json!({ &failing: {} }))
        .await
}

/// A turn of the failing agent on `conversation`: the stream and the
/// stored messages.
async fn failed_after_yielding(app: &TestApp, agent: &str, conversation: &str) -> (Turn, Value) {
    let turn = app.say(ACCOUNT_A, agent, conversation, "go").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(
        turn.of_type("tool-output-available").len(),
        2,
        "{}",
        turn.body
    );
    let messages = stored_messages(app, conversation).await;
    assert_eq!(tool_parts(&messages)[0]["state"], "output-error");
    (turn, messages)
}

/// A chat turn whose call of the tool `echo` needs approval, then the
/// person's decision.
async fn decided_approval(app: &TestApp, echo: &str, model: &str, approved: bool) -> Value {
    let conversation = format!("stored-{model}");
    app.model.script(
        model,
        vec![
            Reply::tool_call("c1", "echo", json!({"q": "rm"})),
            Reply::text("Handled."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, model, json!({ echo: {"needsApproval": true} }))
        .await;
    let user = user_turn(&conversation, "remove it");
    let asked = app.turn(ACCOUNT_A, &agent, user.clone()).await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    let mut assistant = stored_messages(app, &conversation).await[1].clone();
    assert_eq!(
        assistant["parts"][1]["state"], "approval-requested",
        "{assistant}"
    );
    let part = &mut assistant["parts"][1];
    part["state"] = json!("approval-responded");
    part["approval"]["approved"] = json!(approved);
    part["approval"]["reason"] = json!("reviewed");
    let decided = app
        .turn(
            ACCOUNT_A,
            &agent,
            json!({
                "id": conversation,
                "messages": [user["messages"][0], assistant],
                "trigger": "submit-message",
                "messageId": assistant["id"],
            }),
        )
        .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let messages = stored_messages(app, &conversation).await;
    let outcome = if approved {
        "output-available"
    } else {
        "output-denied"
    };
    assert_eq!(tool_parts(&messages)[0]["state"], outcome, "{messages}");
    messages
}

/// A fixture, not produced by the server here: a chat turn interrupted by a
/// server crash, as it is stored once the crash is recovered (text still
/// streaming, unfinished calls failed as interrupted, the message marked
/// `interrupted` in its metadata). A crash trial that produces it belongs
/// in the list beside it.
fn interrupted_turn_fixture() -> Value {
    json!([
        {"id": "u-interrupted", "role": "user", "parts": [{"type": "text", "text": "look it up"}]},
        {"id": "a-interrupted", "role": "assistant", "metadata": {"interrupted": true}, "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "Let me look that", "state": "streaming"},
            {"type": "tool-echo", "toolCallId": "c1", "state": "output-error", "input": {"q": "x"},
             "errorText": "the turn was interrupted: its server stopped"},
            {"type": "tool-echo", "toolCallId": "c2", "state": "output-error",
             "errorText": "the turn was interrupted: its server stopped"},
        ]},
    ])
}

/// Runs `clients/ai-sdk/test/stored.test.mjs` on `shapes`: each must pass
/// `safeValidateUIMessages` of both majors with nothing stripped.
async fn validate_with_ai_sdk(shapes: &[Shape]) {
    let dir = client_dir("ai-sdk");
    let file = tempfile::NamedTempFile::new().unwrap();
    let conversations: Vec<Value> = shapes
        .iter()
        .map(|s| json!({"name": s.name, "messages": s.messages}))
        .collect();
    std::fs::write(
        file.path(),
        serde_json::to_vec(&json!({ "conversations": conversations })).unwrap(),
    )
    .unwrap();
    let output = tokio::process::Command::new("node")
        .args(["--test", "--test-reporter=spec", "test/stored.test.mjs"])
        .current_dir(&dir)
        .env("TOOLSERVER_STORED", file.path())
        .output()
        .await
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the AI SDK refused stored conversations:\n{report}"
    );
    let passed = report
        .lines()
        .filter(|l| l.trim_start().starts_with('✔') && l.contains(": stored "))
        .count();
    assert_eq!(
        passed,
        2 * shapes.len(),
        "each shape passes with both majors:\n{report}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn every_stored_conversation_shape_passes_the_ai_sdk_validator(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let echo = app.upload(ACCOUNT_A, "echo", ECHO, schema("q")).await;
    let failing = failing_agent(&app).await;
    let shapes = vec![
        Shape {
            name: "chat turn with a tool call",
            messages: chat_with_a_tool_call(&app, &echo).await,
        },
        Shape {
            name: "detached turn with a completed call",
            messages: detached_with_a_completed_call(&app).await,
        },
        Shape {
            name: "turn stopped mid tool",
            messages: stopped_mid_tool(&app).await,
        },
        Shape {
            name: "tool that fails after yielding",
            messages: failed_after_yielding(&app, &failing, "stored-failed")
                .await
                .1,
        },
        Shape {
            name: "approval approved",
            messages: decided_approval(&app, &echo, "approved", true).await,
        },
        Shape {
            name: "approval denied",
            messages: decided_approval(&app, &echo, "denied", false).await,
        },
        Shape {
            name: "gemini turn with a signed call and sources",
            messages: gemini_with_a_signed_call_and_sources(&app, &echo).await,
        },
        Shape {
            name: "interrupted by a crash (fixture)",
            messages: interrupted_turn_fixture(),
        },
    ];
    validate_with_ai_sdk(&shapes).await;
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_tool_that_fails_after_yielding_stores_what_the_page_shows_and_tells_the_model(
    pool: PgPool,
) {
    let app = spawn_live_app(pool).await;
    let agent = failing_agent(&app).await;
    let (turn, messages) = failed_after_yielding(&app, &agent, "stored-failed").await;
    let failed = turn.of_type("tool-output-error");
    assert_eq!(failed[0]["errorText"], FAILED_AFTER_YIELDING);
    let part = &tool_parts(&messages)[0];
    assert_eq!(
        part,
        &json!({"type": "tool-failing", "toolCallId": "c1", "state": "output-error", "input": {}, "errorText": FAILED_AFTER_YIELDING}),
        "the stored part is the one useChat builds from the stream"
    );
    let told = app.model.requests("stored-failed")[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .clone();
    let told: Value = serde_json::from_str(told.as_str().unwrap()).unwrap();
    assert_eq!(told, json!({"error": FAILED_AFTER_YIELDING}));
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_stopped_after_yielding_keeps_its_last_output_in_its_error_text(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let messages = stopped_mid_tool(&app).await;
    let part = &tool_parts(&messages)[0];
    assert_eq!(
        part,
        &json!({"type": "tool-hangs", "toolCallId": "c1", "state": "output-error", "input": {},
                "errorText": "the turn was stopped; its last output before that was {\"step\":1}"}),
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_conversation_stored_with_output_on_an_error_part_reads_and_is_saved_without_it(
    pool: PgPool,
) {
    let app = spawn_live_app(pool.clone()).await;
    let agent = failing_agent(&app).await;
    let (_, mut legacy) = failed_after_yielding(&app, &agent, "stored-legacy").await;
    // What earlier releases stored: the error part kept the last preliminary
    // output, and its error text did not mention it.
    let part = &mut legacy[1]["parts"][1];
    part["output"] = json!({"step": 2});
    part["errorText"] = json!("Error: broke after two steps");
    // Stored whole in the conversation's row, as before messages were rows.
    sqlx::query(
        "WITH gone AS (DELETE FROM conversation_messages WHERE conversation_id = 'stored-legacy') \
         UPDATE conversations SET messages = $1::json, message_count = NULL, head = 0 \
         WHERE id = 'stored-legacy'",
    )
    .bind(legacy.to_string())
    .execute(&pool)
    .await
    .unwrap();

    let read = stored_messages(&app, "stored-legacy").await;
    assert_eq!(
        read[1]["parts"][1],
        json!({"type": "tool-failing", "toolCallId": "c1", "state": "output-error", "input": {}, "errorText": "Error: broke after two steps"}),
        "read without the field its state does not allow"
    );

    let next = app.say(ACCOUNT_A, &agent, "stored-legacy", "again").await;
    assert_eq!(next.status, 200, "{}", next.body);
    let told = &app.model.requests("stored-failed")[2]["messages"];
    assert!(
        told.as_array().unwrap().iter().any(|m| m["role"] == "tool"
            && m["content"] == "{\"error\":\"Error: broke after two steps\"}"),
        "the earlier call's outcome is in the history: {told}"
    );
    let (saved, count, legacy_left): (Value, Option<i32>, Value) = sqlx::query_as(
        "SELECT (SELECT json_agg(message ORDER BY seq) FROM conversation_messages \
                 WHERE conversation_id = c.id), c.message_count, c.messages \
         FROM conversations c WHERE c.id = 'stored-legacy'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(saved.as_array().unwrap().len(), 4, "{saved}");
    assert_eq!(count, Some(4), "moved into rows by its next turn");
    assert_eq!(legacy_left, json!([]));
    assert!(
        tool_parts(&saved).iter().all(|p| p.get("output").is_none()),
        "saved again without `output` on error parts: {saved}"
    );
    validate_with_ai_sdk(&[Shape {
        name: "conversation stored by an earlier release, continued",
        messages: stored_messages(&app, "stored-legacy").await,
    }])
    .await;
}
