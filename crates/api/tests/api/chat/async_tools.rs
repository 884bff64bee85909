//! Async tools in a chat turn: the model answers while the call runs, and
//! the result, of an uploaded tool or a built-in one, is injected into the
//! same turn when it arrives.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::fake_tavily::FakeTavily;
use crate::support::*;

use super::assert_tool_results_answer_calls;

const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

fn ms_schema() -> Value {
    json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]})
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
