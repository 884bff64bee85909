//! Turns on the Anthropic and Gemini adapters, end to end: an agent naming
//! the provider, the scripted model speaking its wire format, parallel tool
//! calls run by real runners, and Gemini's own search grounding the answer
//! with sources that reach the stream and the stored message.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::scripted_model::thought_signature;
use toolserver_testsupport::Reply;

use crate::app::spawn_live_app;
use crate::support::*;

use super::{q_schema, ECHO};

/// Creates an agent of `account` on `provider`'s scripted model `model_id`.
async fn agent_on(
    app: &crate::app::TestApp,
    provider: &str,
    model_id: &str,
    tools: Value,
) -> String {
    let base_url = match provider {
        "anthropic" => app.model.anthropic_base_url(),
        _ => app.model.gemini_base_url(),
    };
    let config = json!({
        "model": {"provider": provider, "modelId": model_id},
        "provider": {provider: {"apiKey": "provider-key", "baseUrl": base_url}},
        "systemPrompt": "You are a test agent.",
        "tools": tools,
    });
    app.agent_with_config(ACCOUNT_A, model_id, config).await["agentId"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_anthropic_agent_runs_parallel_tool_calls_then_answers(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    app.model.script(
        "claude-turn",
        vec![
            Reply::tool_call("toolu_1", "echo", json!({"q": "one"})).and_tool_call(
                "toolu_2",
                "echo",
                json!({"q": "two"}),
            ),
            Reply::text("Both echoed."),
        ],
    );
    let agent = agent_on(&app, "anthropic", "claude-turn", json!({ &tool: {} })).await;
    let turn = app
        .say(ACCOUNT_A, &agent, "conv-claude", "echo twice")
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(turn.text(), "Both echoed.");
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs.len(), 2, "{}", turn.body);
    for (output, q) in outputs.iter().zip(["one", "two"]) {
        assert_eq!(output["output"]["echo"]["q"], q, "{output}");
    }
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "stop");

    let requests = app.model.requests("claude-turn");
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["system"], "You are a test agent.");
    assert_eq!(requests[0]["tools"][0]["name"], "echo");
    let answers = requests[1]["messages"][2]["content"].as_array().unwrap();
    let answered: Vec<&str> = answers
        .iter()
        .map(|block| block["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(answered, ["toolu_1", "toolu_2"], "{}", requests[1]);
    let headers = app.model.request_headers("claude-turn");
    assert_eq!(headers[0]["x-api-key"], "provider-key");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_gemini_agent_with_google_search_streams_and_stores_its_sources(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.model.script(
        "gemini-turn",
        vec![Reply::text("Rust 1.95 is out.")
            .and_source("https://blog.rust-lang.org/", "Rust Blog")
            .and_source("https://releases.rs/", "Releases")],
    );
    let agent = agent_on(&app, "google", "gemini-turn", json!({"googleSearch": {}})).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-gemini", "news?").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(turn.text(), "Rust 1.95 is out.");
    let sources: Vec<(Value, Value)> = turn
        .of_type("source-url")
        .iter()
        .map(|source| (source["url"].clone(), source["title"].clone()))
        .collect();
    assert_eq!(
        sources,
        [
            (json!("https://blog.rust-lang.org/"), json!("Rust Blog")),
            (json!("https://releases.rs/"), json!("Releases")),
        ]
    );
    let requests = app.model.requests("gemini-turn");
    assert_eq!(requests[0]["tools"], json!([{"googleSearch": {}}]));
    assert_eq!(
        requests[0]["systemInstruction"],
        json!({"parts": [{"text": "You are a test agent."}]})
    );

    let (status, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-gemini",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200);
    let parts = conversation["messages"][1]["parts"].as_array().unwrap();
    let stored: Vec<&Value> = parts
        .iter()
        .filter(|part| part["type"] == "source-url")
        .collect();
    assert_eq!(stored.len(), 2, "{conversation}");
    assert_eq!(stored[0]["url"], "https://blog.rust-lang.org/");

    // The next turn's history leaves the sources out and goes on.
    app.model.script("gemini-turn", vec![Reply::text("Yes.")]);
    let again = app.say(ACCOUNT_A, &agent, "conv-gemini", "sure?").await;
    assert_eq!(again.status, 200, "{}", again.body);
    let history = &app.model.requests("gemini-turn")[1]["contents"];
    assert_eq!(
        history[1],
        json!({"role": "model", "parts": [{"text": "Rust 1.95 is out."}]})
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_gemini_call_keeps_its_thought_signature_into_the_next_pass(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    app.model.script(
        "gemini-signed",
        vec![
            Reply::tool_call("call_1", "echo", json!({"q": "one"})),
            Reply::text("Echoed."),
        ],
    );
    let agent = agent_on(&app, "google", "gemini-signed", json!({ &tool: {} })).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-signed", "echo").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(turn.text(), "Echoed.");
    let signature = json!({"google": {"thoughtSignature": thought_signature("call_1")}});
    let available = turn.of_type("tool-input-available");
    assert_eq!(available[0]["providerMetadata"], signature, "{}", turn.body);

    let requests = app.model.requests("gemini-signed");
    let call = &requests[1]["contents"][1]["parts"][0];
    assert_eq!(call["functionCall"]["name"], "echo", "{}", requests[1]);
    assert_eq!(call["thoughtSignature"], thought_signature("call_1"));

    let (_, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-signed",
            ACCOUNT_A,
            None,
        )
        .await;
    let stored = conversation["messages"][1]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|part| part["type"] == "tool-echo")
        .cloned()
        .unwrap();
    assert_eq!(stored["callProviderMetadata"], signature, "{stored}");

    // A later turn sends the stored signature back with the call.
    app.model
        .script("gemini-signed", vec![Reply::text("Again.")]);
    let again = app.say(ACCOUNT_A, &agent, "conv-signed", "again").await;
    assert_eq!(again.status, 200, "{}", again.body);
    let history = &app.model.requests("gemini-signed")[2]["contents"];
    assert_eq!(
        history[1]["parts"][0]["thoughtSignature"],
        thought_signature("call_1"),
        "{history}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn google_search_is_refused_on_other_providers(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({
                "name": "claude-search",
                "config": {
                    "model": {"provider": "anthropic", "modelId": "claude"},
                    "provider": {"anthropic": {"apiKey": "k", "baseUrl": app.model.anthropic_base_url()}},
                    "tools": {"googleSearch": {}},
                },
            })),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["field"], "config.tools.googleSearch",
        "{body}"
    );
}
