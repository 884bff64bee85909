//! Agent turns over real HTTP: a scripted model, real Node runners, real
//! Postgres. Every request the server sent the model is checked too.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::fake_tavily::FakeTavily;
use crate::support::*;

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input, greeting: ctx.config.greeting, region: ctx.config.region }; } };";
const STREAMING: &str = "export default { async *execute(ctx, input) { for (let i = 1; i <= 3; i++) { yield { step: i, of: 3 }; await new Promise(r => setTimeout(r, 20)); } } };";
const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";
const HANGS: &str = "export default { async execute(ctx) { await new Promise(() => {}); } };";

fn q_schema() -> Value {
    json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
}

fn ms_schema() -> Value {
    json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]})
}

/// Each tool message the server sent answers a tool call of the assistant
/// message before it, and every call is answered.
fn assert_tool_results_answer_calls(request: &Value) {
    let messages = request["messages"].as_array().unwrap();
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        match message["role"].as_str().unwrap() {
            "assistant" => {
                assert!(open.is_empty(), "unanswered calls {open:?} in {request}");
                open = message["tool_calls"]
                    .as_array()
                    .map(|calls| {
                        calls
                            .iter()
                            .map(|c| c["id"].as_str().unwrap().to_owned())
                            .collect()
                    })
                    .unwrap_or_default();
            }
            "tool" => {
                let id = message["tool_call_id"].as_str().unwrap();
                let at = open
                    .iter()
                    .position(|c| c == id)
                    .unwrap_or_else(|| panic!("tool result {id} answers no call: {request}"));
                open.remove(at);
            }
            _ => assert!(open.is_empty(), "unanswered calls {open:?} in {request}"),
        }
    }
    assert!(open.is_empty(), "unanswered calls {open:?} in {request}");
}

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

#[sqlx::test(migrations = "../../migrations")]
async fn unknown_tools_are_refused_at_save_and_at_run(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let foreign = app.upload(ACCOUNT_B, "echo", ECHO, q_schema()).await;
    for (tools, field) in [
        (json!({"bash": {}}), "config.tools.bash"),
        (json!({ &foreign: {} }), &*format!("config.tools.{foreign}")),
        (json!({"async_status": {}}), "config.tools.async_status"),
        (json!({"googleSearch": {}}), "config.tools.googleSearch"),
    ] {
        let (status, body) = app
            .request(
                reqwest::Method::POST,
                "/agents",
                ACCOUNT_A,
                Some(json!({"name": "x", "config": app.agent_config("m", tools)})),
            )
            .await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (422, Some(field)),
            "{body}"
        );
    }
    let (_, listed) = app
        .request(reqwest::Method::GET, "/agents", ACCOUNT_A, None)
        .await;
    assert_eq!(listed["agents"], json!([]));

    // Saved while the tool existed; the tool is deleted; the next turn is refused.
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    app.model.script("gone", vec![Reply::text("unused")]);
    let agent = app.agent(ACCOUNT_A, "gone", json!({ &tool: {} })).await;
    let (status, _) = app
        .request(
            reqwest::Method::DELETE,
            &format!("/accounts/me/tools/{tool}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let turn = app.say(ACCOUNT_A, &agent, "conv-gone", "hi").await;
    assert_eq!(turn.status, 422, "{}", turn.body);
    assert_eq!(
        turn.json()["error"]["field"],
        format!("config.tools.{tool}")
    );
    assert_eq!(app.model.request_count("gone"), 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn async_on_a_provider_defined_tool_is_a_warning(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "x", "config": app.agent_config("m", json!({"googleSearch": {"enabled": false, "async": true}}))})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert!(
        body["warnings"][0]
            .as_str()
            .unwrap()
            .contains("googleSearch"),
        "{body}"
    );
}

/// Runs a turn that asks for approval and returns (conversation body, the
/// assistant message as stored).
async fn pending_approval(
    app: &TestApp,
    model: &str,
    conversation: &str,
) -> (String, Value, Value) {
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    app.model.script(
        model,
        vec![
            Reply::tool_call("call_ap", "echo", json!({"q": "rm -rf"})),
            Reply::text("Handled."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, model, json!({ &tool: {"needsApproval": true} }))
        .await;
    let user = user_turn(conversation, "clean up");
    let turn = app.turn(ACCOUNT_A, &agent, user.clone()).await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let types = turn.types();
    let at = types
        .iter()
        .position(|t| t == "tool-approval-request")
        .unwrap();
    assert_eq!(types[at - 1], "tool-input-available");
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "tool-calls");
    assert!(turn.of_type("tool-output-available").is_empty());
    let (_, stored) = app
        .request(
            reqwest::Method::GET,
            &format!("/conversations/{conversation}"),
            ACCOUNT_A,
            None,
        )
        .await;
    let assistant = stored["messages"][1].clone();
    assert_eq!(assistant["parts"][1]["state"], "approval-requested");
    assert_eq!(
        assistant["parts"][1]["approval"]["id"],
        turn.of_type("tool-approval-request")[0]["approvalId"]
    );
    (agent, user, assistant)
}

fn respond(user: &Value, assistant: &Value, approval_id: &Value, approved: bool) -> Value {
    let mut assistant = assistant.clone();
    assistant["parts"][1]["state"] = json!("approval-responded");
    assistant["parts"][1]["approval"] =
        json!({"id": approval_id, "approved": approved, "reason": "reviewed"});
    json!({
        "id": user["id"],
        "messages": [user["messages"][0], assistant],
        "trigger": "submit-message",
        "messageId": assistant["id"],
    })
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_approved_call_runs_and_continues_the_same_message(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (agent, user, assistant) = pending_approval(&app, "approve", "conv-approve").await;
    let approval_id = assistant["parts"][1]["approval"]["id"].clone();
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &approval_id, true),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(
        turn.chunks[0],
        json!({"type": "start", "messageId": assistant["id"]})
    );
    assert_eq!(
        turn.chunks[1]["type"], "tool-output-available",
        "{:?}",
        turn.chunks
    );
    assert_eq!(turn.chunks[1]["output"]["echo"], json!({"q": "rm -rf"}));
    assert_eq!(turn.text(), "Handled.");
    let requests = app.model.requests("approve");
    assert_eq!(requests.len(), 2);
    assert_tool_results_answer_calls(&requests[1]);
    let (_, stored) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-approve",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(stored["messages"].as_array().unwrap().len(), 2);
    assert_eq!(
        stored["messages"][1]["parts"][1]["state"],
        "output-available"
    );
    assert_eq!(
        stored["messages"][1]["parts"][1]["approval"]["approved"],
        true
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_denied_call_does_not_run_and_the_model_is_told(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (agent, user, assistant) = pending_approval(&app, "deny", "conv-deny").await;
    let approval_id = assistant["parts"][1]["approval"]["id"].clone();
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &approval_id, false),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(
        turn.chunks[1],
        json!({"type": "tool-output-denied", "toolCallId": "call_ap"})
    );
    assert!(turn.of_type("tool-output-available").is_empty());
    let told = app.model.requests("deny")[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        told["content"].as_str().unwrap().contains("denied"),
        "{told}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_forged_approval_id_is_refused_and_changes_nothing(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (agent, user, assistant) = pending_approval(&app, "forged", "conv-forged").await;
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &json!("apr_forged"), true),
        )
        .await;
    assert_eq!(turn.status, 409, "{}", turn.body);
    assert_eq!(turn.json()["error"]["code"], "approval_not_pending");
    let (_, stored) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-forged",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(stored["messages"][1], assistant);
    assert_eq!(app.model.request_count("forged"), 1);
    // The real id still works afterwards.
    let approval_id = assistant["parts"][1]["approval"]["id"].clone();
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &approval_id, true),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_uploaded_async_tool_result_arrives_while_the_model_answers(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    app.model.script(
        "async-up",
        vec![
            Reply::tool_call("call_async", "slow", json!({"ms": 300})),
            Reply::text("I started the job and will report back when it is done.")
                .chunk_delay(Duration::from_millis(60)),
            // Step 2 is the injected async_status call, which the model does not make.
            Reply::error(500, "step 2 is not a model pass"),
            Reply::text("The job slept 300 ms."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "async-up", json!({ &tool: {"async": true} }))
        .await;
    let turn = app
        .say(ACCOUNT_A, &agent, "conv-async", "run the job")
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs[0]["output"]["status"], "pending");
    let status_id = outputs[0]["output"]["statusId"]
        .as_str()
        .unwrap()
        .to_owned();
    let arrival = outputs
        .iter()
        .find(|o| o["output"]["status"] == "completed")
        .expect("the result was injected");
    assert_eq!(arrival["output"]["statusId"], status_id.as_str());
    assert_eq!(arrival["output"]["result"], json!({"slept": 300}));
    assert!(
        turn.text().ends_with("The job slept 300 ms."),
        "{}",
        turn.text()
    );
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "stop");

    let requests = app.model.requests("async-up");
    assert_eq!(requests.len(), 3);
    assert!(requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["name"] == "async_status"));
    let pending: Value = serde_json::from_str(
        requests[1]["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(pending["status"], "pending");
    let injected = requests[2]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        injected["content"]
            .as_str()
            .unwrap()
            .contains("\"slept\":300"),
        "{injected}"
    );
    for request in &requests {
        assert_tool_results_answer_calls(request);
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_builtin_async_tool_result_is_injected_too(pool: PgPool) {
    let tavily = FakeTavily::start(Duration::from_millis(300)).await;
    let app = TestApp::live(pool)
        .tavily(tavily.url.clone())
        .harness(Default::default())
        .spawn()
        .await;
    app.model.script(
        "async-builtin",
        vec![
            Reply::tool_call("call_t", "tavilySearch", json!({"query": "rust"})),
            Reply::text("Searching in the background.").chunk_delay(Duration::from_millis(60)),
            Reply::error(500, "step 2 is not a model pass"),
            Reply::text("Found it."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "async-builtin",
            json!({"tavilySearch": {"async": true, "apiKey": "tvly-account", "maxResults": 2}}),
        )
        .await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-tavily", "search").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs[0]["output"]["status"], "pending");
    let arrival = outputs
        .iter()
        .find(|o| o["output"]["status"] == "completed")
        .expect("injected");
    assert_eq!(arrival["output"]["result"]["results"][0]["title"], "rust");
    let seen = tavily.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, "Bearer tvly-account");
    assert_eq!(seen[0].1, json!({"query": "rust", "max_results": 2}));
    assert!(turn.text().ends_with("Found it."), "{}", turn.text());
    assert_eq!(app.model.request_count("async-builtin"), 3);
}

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
        &pool,
        &account,
        "conv-dead",
        agent_id,
        toolserver_store::conversations::LeaseTerms {
            holder: uuid::Uuid::now_v7(),
            process: uuid::Uuid::now_v7(),
            lease: Duration::from_secs(1),
        },
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

#[test]
fn frames_parse_and_demand_done() {
    assert_eq!(
        parse_frames("data: {\"type\":\"start\"}\n\n: keep-alive\n\ndata: [DONE]\n\n").len(),
        1
    );
    assert!(std::panic::catch_unwind(|| parse_frames("data: {\"type\":\"start\"}\n\n")).is_err());
}
