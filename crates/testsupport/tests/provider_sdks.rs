//! The scripted model against the providers' official SDKs
//! (clients/providers: `@anthropic-ai/sdk` and `@google/genai`): what each
//! SDK understands of a streamed text, of parallel tool calls, of grounding
//! sources and of an error, and what it sent.
#![allow(clippy::expect_used)]

use serde_json::{json, Value};
use toolserver_testsupport::clients::client_dir;
use toolserver_testsupport::{Reply, ScriptedModel};

/// Streams one request for `model` with `provider`'s SDK (`anthropic` or
/// `google`) and returns the SDK's summary of the answer.
async fn stream(provider: &str, scripted: &ScriptedModel, model: &str) -> Value {
    let output = tokio::process::Command::new("node")
        .args(["bin/stream.mjs", provider, &scripted.origin(), model])
        .current_dir(client_dir("providers"))
        .output()
        .await
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the {provider} SDK client crashed: {stdout}{stderr}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{err}: {stdout} {stderr}"))
}

fn header(scripted: &ScriptedModel, model: &str, name: &str) -> String {
    let headers = scripted.request_headers(model);
    let last = headers.last().expect("a request was received");
    last.get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn two_calls() -> Reply {
    Reply::tool_call("call_1", "echo", json!({"text": "one"})).and_tool_call(
        "call_2",
        "echo",
        json!({"text": "two", "n": 2}),
    )
}

fn both_calls() -> Value {
    json!([
        {"name": "echo", "input": {"text": "one"}},
        {"name": "echo", "input": {"text": "two", "n": 2}},
    ])
}

#[tokio::test]
async fn the_anthropic_sdk_reads_text_tool_calls_and_errors() {
    let scripted = ScriptedModel::start().await;
    scripted.script("text", vec![Reply::text("Hello there friend")]);
    scripted.script("calls", vec![two_calls()]);
    scripted.script("broken", vec![Reply::error(400, "bad model")]);
    scripted.script("busy", vec![Reply::error(429, "slow down").retry_after(7)]);
    scripted.script("cut", vec![Reply::text("Hello").finish_reason("length")]);

    let text = stream("anthropic", &scripted, "text").await;
    assert_eq!(text["text"], "Hello there friend", "{text}");
    assert_eq!(text["toolCalls"], json!([]), "{text}");
    assert_eq!(text["stopReason"], "end_turn", "{text}");
    assert_eq!(text["inputTokens"], 10, "{text}");
    assert_eq!(text["outputTokens"], 3, "{text}");
    assert_eq!(text["sources"], json!([]), "{text}");
    assert_eq!(scripted.request_count("text"), 1);
    let request = &scripted.requests("text")[0];
    assert_eq!(request["stream"], true, "{request}");
    assert_eq!(request["tools"][0]["name"], "echo", "{request}");
    assert_eq!(
        header(&scripted, "text", "authorization"),
        "Bearer test-key",
        "the 1.x SDK sends its API key as a bearer token, not x-api-key"
    );
    assert!(!header(&scripted, "text", "anthropic-version").is_empty());

    let cut = stream("anthropic", &scripted, "cut").await;
    assert_eq!(cut["stopReason"], "max_tokens", "{cut}");

    let calls = stream("anthropic", &scripted, "calls").await;
    assert_eq!(calls["toolCalls"], both_calls(), "{calls}");
    assert_eq!(calls["text"], "", "{calls}");
    assert_eq!(calls["stopReason"], "tool_use", "{calls}");

    let broken = stream("anthropic", &scripted, "broken").await;
    assert_eq!(
        broken["error"],
        json!({"status": 400, "type": "invalid_request_error", "message": "bad model"}),
        "{broken}"
    );
    let busy = stream("anthropic", &scripted, "busy").await;
    assert_eq!(
        busy["error"],
        json!({"status": 429, "type": "rate_limit_error", "message": "slow down"}),
        "{busy}"
    );
    assert_eq!(scripted.request_count("busy"), 1, "no retries");
}

#[tokio::test]
async fn the_google_sdk_reads_text_tool_calls_sources_and_errors() {
    let scripted = ScriptedModel::start().await;
    scripted.script("text", vec![Reply::text("Hello there friend")]);
    scripted.script("calls", vec![two_calls()]);
    scripted.script(
        "grounded",
        vec![Reply::text("Rust is a language")
            .and_source("https://www.rust-lang.org/", "Rust")
            .and_source("https://doc.rust-lang.org/book/", "The Book")],
    );
    scripted.script("broken", vec![Reply::error(400, "bad model")]);
    scripted.script("busy", vec![Reply::error(429, "slow down").retry_after(7)]);
    scripted.script("cut", vec![Reply::text("Hello").finish_reason("length")]);

    let text = stream("google", &scripted, "text").await;
    assert_eq!(text["text"], "Hello there friend", "{text}");
    assert_eq!(text["toolCalls"], json!([]), "{text}");
    assert_eq!(text["stopReason"], "STOP", "{text}");
    assert_eq!(text["inputTokens"], 10, "{text}");
    assert_eq!(text["outputTokens"], 3, "{text}");
    assert_eq!(text["sources"], json!([]), "{text}");
    assert_eq!(scripted.request_count("text"), 1);
    let request = &scripted.requests("text")[0];
    assert_eq!(
        request["contents"][0]["parts"][0]["text"], "hi",
        "{request}"
    );
    assert_eq!(
        request["tools"][0]["functionDeclarations"][0]["name"], "echo",
        "{request}"
    );
    assert_eq!(header(&scripted, "text", "x-goog-api-key"), "test-key");

    let cut = stream("google", &scripted, "cut").await;
    assert_eq!(cut["stopReason"], "MAX_TOKENS", "{cut}");

    let calls = stream("google", &scripted, "calls").await;
    assert_eq!(calls["toolCalls"], both_calls(), "{calls}");
    assert_eq!(calls["stopReason"], "STOP", "{calls}");

    let grounded = stream("google", &scripted, "grounded").await;
    assert_eq!(grounded["text"], "Rust is a language", "{grounded}");
    assert_eq!(
        grounded["sources"],
        json!([
            {"uri": "https://www.rust-lang.org/", "title": "Rust"},
            {"uri": "https://doc.rust-lang.org/book/", "title": "The Book"},
        ]),
        "{grounded}"
    );

    let broken = stream("google", &scripted, "broken").await;
    assert_eq!(
        broken["error"],
        json!({"status": 400, "type": "INVALID_ARGUMENT", "message": "bad model"}),
        "{broken}"
    );
    let busy = stream("google", &scripted, "busy").await;
    assert_eq!(
        busy["error"],
        json!({"status": 429, "type": "RESOURCE_EXHAUSTED", "message": "slow down"}),
        "{busy}"
    );
    assert_eq!(scripted.request_count("busy"), 1, "no retries");
}
