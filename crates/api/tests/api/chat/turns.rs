//! Turns that go well: the UI message stream protocol and what is stored,
//! an uploaded tool's merged config and result, a streaming tool's
//! preliminary snapshots, invalid tool input answered as an error, and the
//! frame parser the tests rely on.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::spawn_live_app;
use crate::support::*;

use super::{assert_tool_results_answer_calls, q_schema, ECHO};

const STREAMING: &str = "export default { async *execute(ctx, input) { for (let i = 1; i <= 3; i++) { yield { step: i, of: 3 }; await new Promise(r => setTimeout(r, 20)); } } };";

#[sqlx::test(migrations = "../../migrations")]
async fn a_plain_text_turn_streams_the_protocol_and_is_stored(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.model
        .script("plain", vec![Reply::text("Hello there, friend.")]);
    let agent = app.agent(ACCOUNT_A, "plain", json!({})).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-plain", "hi").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    for (name, value) in [
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache"),
        ("x-vercel-ai-ui-message-stream", "v1"),
        ("x-accel-buffering", "no"),
    ] {
        assert_eq!(turn.headers[name], value, "{name}");
    }
    let mut types = turn.types();
    types.dedup();
    assert_eq!(
        types,
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(turn.text(), "Hello there, friend.");
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "stop");
    let message_id = turn.chunks[0]["messageId"].as_str().unwrap().to_owned();

    let requests = app.model.requests("plain");
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0]["messages"][0],
        json!({"role": "system", "content": "You are a test agent."})
    );
    assert_eq!(
        requests[0]["messages"][1],
        json!({"role": "user", "content": "hi"})
    );

    let (status, conversation) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-plain",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200);
    let messages = conversation["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["id"], message_id.as_str());
    assert_eq!(
        messages[1]["parts"][1],
        json!({"type": "text", "text": "Hello there, friend.", "state": "done"})
    );

    // The next turn continues the stored conversation.
    app.model.script("plain", vec![Reply::text("Again.")]);
    let second = app.say(ACCOUNT_A, &agent, "conv-plain", "once more").await;
    assert_eq!(second.status, 200);
    let requests = app.model.requests("plain");
    let history = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(history.len(), 4, "{history:?}");
    assert_eq!(
        history[2],
        json!({"role": "assistant", "content": "Hello there, friend."})
    );

    // Another account sees none of it.
    let (status, _) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-plain",
            ACCOUNT_B,
            None,
        )
        .await;
    assert_eq!(status, 404);
    let other = app.say(ACCOUNT_B, &agent, "conv-b", "hi").await;
    assert_eq!(other.status, 404);
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_uploaded_tool_runs_with_merged_config_and_its_result_goes_back(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    app.model.script(
        "uploaded",
        vec![
            Reply::tool_call("call_1", "echo", json!({"q": "weather"})),
            Reply::text("It is sunny."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "uploaded", json!({ &tool: {"region": "eu"} }))
        .await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-tool", "weather?").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let types = turn.types();
    let position = |t: &str| types.iter().position(|x| x == t).unwrap();
    assert!(position("tool-input-start") < position("tool-input-delta"));
    assert!(position("tool-input-delta") < position("tool-input-available"));
    assert!(position("tool-input-available") < position("tool-output-available"));
    assert_eq!(turn.of_type("start-step").len(), 2);
    assert_eq!(
        turn.of_type("tool-input-available")[0]["input"],
        json!({"q": "weather"})
    );
    assert_eq!(
        turn.of_type("tool-output-available")[0]["output"],
        json!({"echo": {"q": "weather"}, "greeting": "hi", "region": "eu"})
    );
    assert_eq!(turn.text(), "It is sunny.");

    let requests = app.model.requests("uploaded");
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["tools"][0]["function"]["name"], "echo");
    assert_eq!(
        requests[0]["tools"][0]["function"]["parameters"],
        q_schema()
    );
    for request in &requests {
        assert_tool_results_answer_calls(request);
    }
    let tool_message = &requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool_message["tool_call_id"], "call_1");
    let result: Value = serde_json::from_str(tool_message["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["region"], "eu");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_streaming_tool_sends_preliminary_snapshots_then_one_final(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app
        .upload(ACCOUNT_A, "progress", STREAMING, json!({"type": "object"}))
        .await;
    app.model.script(
        "streaming",
        vec![
            Reply::tool_call("call_s", "progress", json!({})),
            Reply::text("Done."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "streaming", json!({ &tool: {} }))
        .await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-stream", "go").await;
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs.len(), 4, "{:?}", turn.chunks);
    for (i, output) in outputs[..3].iter().enumerate() {
        assert_eq!(output["preliminary"], true);
        assert_eq!(output["output"], json!({"step": i + 1, "of": 3}));
    }
    assert!(outputs[3].get("preliminary").is_none());
    assert_eq!(outputs[3]["output"], json!({"step": 3, "of": 3}));
    let sent = app.model.requests("streaming")[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(sent["content"], json!({"step": 3, "of": 3}).to_string());
}

#[sqlx::test(migrations = "../../migrations")]
async fn invalid_input_is_an_error_result_and_the_loop_continues(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    app.model.script(
        "invalid",
        vec![
            Reply::tool_call("call_bad", "echo", json!({"q": 5})),
            Reply::tool_call("call_good", "echo", json!({"q": "five"})),
            Reply::text("Fixed it."),
        ],
    );
    let agent = app.agent(ACCOUNT_A, "invalid", json!({ &tool: {} })).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-invalid", "go").await;
    let errors = turn.of_type("tool-input-error");
    assert_eq!(errors.len(), 1, "{:?}", turn.chunks);
    assert_eq!(errors[0]["toolCallId"], "call_bad");
    assert!(
        errors[0]["errorText"].as_str().unwrap().contains("/q"),
        "{}",
        errors[0]
    );
    assert_eq!(turn.of_type("tool-output-available").len(), 1);
    assert_eq!(turn.text(), "Fixed it.");
    let requests = app.model.requests("invalid");
    assert_eq!(requests.len(), 3);
    let told = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(told["tool_call_id"], "call_bad");
    assert!(
        told["content"].as_str().unwrap().contains("inputSchema"),
        "{told}"
    );
    for request in &requests {
        assert_tool_results_answer_calls(request);
    }
}

#[test]
fn frames_parse_and_demand_done() {
    assert_eq!(
        parse_frames("data: {\"type\":\"start\"}\n\n: keep-alive\n\ndata: [DONE]\n\n").len(),
        1
    );
    assert!(std::panic::catch_unwind(|| parse_frames("data: {\"type\":\"start\"}\n\n")).is_err());
}
