//! Direct invocation over real HTTP: a server on a loopback port, real Node
//! runners, and a filesystem store whose signed links point at that server.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_api::ApiSettings;

use crate::app::TestApp;
use crate::support::*;

/// Any object as input.
fn any_input() -> Value {
    json!({"type": "object"})
}

#[sqlx::test(migrations = "../../migrations")]
async fn plain_call_returns_output_with_merged_config(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "echo", "export default { execute(ctx, input) { console.log('ran'); return { input, config: ctx.config, key: ctx.idempotencyKey }; } };", any_input())
        .await;
    let (status, body) = app
        .invoke(
            ACCOUNT_A,
            &tool,
            json!({"input": {"q": "x"}, "config": {"extra": true}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"]["input"], json!({"q": "x"}));
    assert_eq!(
        body["output"]["config"],
        json!({"greeting": "hi", "extra": true})
    );
    assert_eq!(body["output"]["key"], body["callId"]);
    assert_eq!(body["logs"], json!([{"level": "log", "message": "ran"}]));
}

#[sqlx::test(migrations = "../../migrations")]
async fn input_is_validated_before_anything_runs(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let schema =
        json!({"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}});
    let echo = std::str::from_utf8(BUNDLE).unwrap();
    let tool = app.upload(ACCOUNT_A, "strict", echo, schema).await;
    let (status, body) = app
        .invoke(ACCOUNT_A, &tool, json!({"input": {"q": 5}}))
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["field"], "input");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("/q"),
        "{body}"
    );
    let (status, _) = app
        .invoke(ACCOUNT_B, &tool, json!({"input": {"q": "x"}}))
        .await;
    assert_eq!(status, 404, "another account cannot run it");
    let (status, _) = app
        .invoke(
            ACCOUNT_A,
            &tool,
            json!({"input": {"q": "x"}, "timeoutMs": 0}),
        )
        .await;
    assert_eq!(status, 400);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_throwing_tool_is_a_structured_result(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app
        .upload(
            ACCOUNT_A,
            "thrower",
            "export default { execute() { throw new RangeError('too far'); } };",
            any_input(),
        )
        .await;
    let (status, body) = app.invoke(ACCOUNT_A, &tool, json!({"input": {}})).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["error"],
        json!({"name": "RangeError", "message": "too far"})
    );
    assert!(body.get("output").is_none());
}

#[sqlx::test(migrations = "../../migrations")]
async fn sse_delivers_the_first_chunk_before_the_generator_finishes(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let source = r#"
import { existsSync } from 'node:fs';
export default {
  async *execute(ctx, input) {
    yield { step: 1 };
    while (!existsSync(process.cwd() + '/release')) await new Promise(r => setTimeout(r, 10));
    yield { step: 2 };
  },
};"#;
    let tool = app.upload(ACCOUNT_A, "streamer", source, any_input()).await;
    let reply = app
        .post(&format!("/accounts/me/tools/{tool}/invoke"), ACCOUNT_A)
        .header("accept", "text/event-stream")
        .json(&json!({"input": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    assert!(reply.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = reply.bytes_stream();
    let mut text = String::new();
    while !text.contains("event: chunk") {
        let next = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&next.unwrap().unwrap()));
    }
    assert!(text.contains(r#"data: {"step":1}"#), "{text}");
    assert!(
        !text.contains("event: result"),
        "the generator is still waiting"
    );
    std::fs::write(app.work_dir(ACCOUNT_A, &tool).join("release"), b"go").unwrap();
    while let Some(Ok(bytes)) = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .unwrap()
    {
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    assert!(text.contains(r#"data: {"step":2}"#), "{text}");
    assert!(
        text.contains("event: result\ndata: {\"output\":{\"step\":2}}"),
        "{text}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_large_bundle_travels_by_signed_url(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let mut source =
        "export default { execute(ctx, input) { return input.n + 1; } };\n//".to_owned();
    source.push_str(&"x".repeat(200 * 1024));
    let tool = app.upload(ACCOUNT_A, "large", &source, any_input()).await;
    for n in 0..2 {
        let (status, body) = app
            .invoke(ACCOUNT_A, &tool, json!({"input": {"n": n}}))
            .await;
        assert_eq!(status, 200);
        assert_eq!(body["output"], json!(n + 1), "{body}");
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn same_tool_name_in_two_accounts_runs_in_two_runners(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    // Module state lives as long as the runner's worker process.
    let source =
        "const runner = crypto.randomUUID(); export default { execute() { return runner; } };";
    let a = app.upload(ACCOUNT_A, "same", source, any_input()).await;
    let b = app.upload(ACCOUNT_B, "same", source, any_input()).await;
    let (_, first_a) = app.invoke(ACCOUNT_A, &a, json!({"input": {}})).await;
    let (_, first_b) = app.invoke(ACCOUNT_B, &b, json!({"input": {}})).await;
    let (_, again_a) = app.invoke(ACCOUNT_A, &a, json!({"input": {}})).await;
    assert!(first_a["output"].is_string(), "{first_a}");
    assert_eq!(
        first_a["output"], again_a["output"],
        "the same runner is reused"
    );
    assert_ne!(first_a["output"], first_b["output"], "separate runners");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_request_past_the_request_timeout_answers_408(pool: PgPool) {
    let settings = ApiSettings {
        request_timeout: Duration::from_millis(300),
        ..ApiSettings::default()
    };
    let app = TestApp::builder(pool).serve().api(settings).spawn().await;
    let slow = "export default { async execute() { await new Promise(r => setTimeout(r, 3000)); return 1; } };";
    let tool = app.upload(ACCOUNT_A, "slow", slow, any_input()).await;
    let (status, body) = app.invoke(ACCOUNT_A, &tool, json!({"input": {}})).await;
    assert_eq!(status, 408);
    assert_eq!(body["error"]["code"], "request_timeout");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_tool_past_its_deadline_is_a_deadline_error(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let hangs = "export default { execute() { return new Promise(() => {}); } };";
    let tool = app.upload(ACCOUNT_A, "hangs", hangs, any_input()).await;
    let (status, body) = app
        .invoke(ACCOUNT_A, &tool, json!({"input": {}, "timeoutMs": 200}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["error"]["name"], "DeadlineExceeded", "{body}");
}
