//! Agent turns over real HTTP: a scripted model, real Node runners, real
//! Postgres. Every request the server sent the model is checked too. What
//! the modules share: the echo tool and the check that every tool call the
//! model made was answered.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_harness::webhooks::WebhookSettings;

use crate::app::{fast_lifecycle, TestApp};

mod approval;
mod async_tools;
mod channels;
mod endings;
mod handoff;
mod limits;
mod providers;
mod retries;
mod tool_config;
mod tool_effects;
mod turns;

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input, greeting: ctx.config.greeting, region: ctx.config.region }; } };";

/// A live app whose webhook posts (handoff announcements, channel answers)
/// are tried `max_attempts` times, 50 ms apart at first.
async fn with_fast_webhooks(pool: PgPool, max_attempts: u32) -> TestApp {
    let mut settings = fast_lifecycle();
    settings.webhooks = WebhookSettings {
        max_attempts,
        first_retry: Duration::from_millis(50),
        max_retry: Duration::from_millis(200),
        timeout: Duration::from_secs(2),
        poll: Duration::from_millis(20),
        ..WebhookSettings::DEFAULT
    };
    TestApp::live(pool).harness(settings).spawn().await
}

fn q_schema() -> Value {
    json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
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
