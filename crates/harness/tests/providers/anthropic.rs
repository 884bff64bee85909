//! The Anthropic Messages adapter.

use serde_json::json;
use toolserver_harness::provider::anthropic::AnthropicProvider;
use toolserver_harness::provider::{ChatMessage, FinishReason, ProviderError, ToolCall, ToolSpec};
use toolserver_testsupport::{Reply, ScriptedModel};

use super::{ask, calls_of, failure, finish_of, http, run, text_of};

fn provider(model: &ScriptedModel) -> AnthropicProvider {
    let base = url::Url::parse(&model.anthropic_base_url()).unwrap();
    AnthropicProvider::new(http(true), base, Some("sk-ant-test".into()))
}

#[tokio::test]
async fn text_streams_with_usage_and_the_key_and_version_headers() {
    let model = ScriptedModel::start().await;
    model.script("claude-text", vec![Reply::text("Hello there, friend.")]);
    let events = run(&provider(&model), ask("claude-text")).await;
    assert!(events.len() >= 3, "{events:?}");
    assert_eq!(text_of(&events), "Hello there, friend.");
    let (reason, usage) = finish_of(&events);
    assert_eq!(reason, FinishReason::Stop);
    assert_eq!(usage.input_tokens, 10);
    assert!(usage.output_tokens > 0, "{usage:?}");
    let headers = model.request_headers("claude-text");
    assert_eq!(headers[0]["x-api-key"], "sk-ant-test");
    assert_eq!(headers[0]["anthropic-version"], "2023-06-01");
    assert!(headers[0].get("authorization").is_none());
}

#[tokio::test]
async fn parallel_tool_calls_stream_their_inputs() {
    let model = ScriptedModel::start().await;
    model.script(
        "claude-tools",
        vec![
            Reply::tool_call("toolu_a", "weather", json!({"city": "Zürich"})).and_tool_call(
                "toolu_b",
                "time",
                json!({"zone": "CET"}),
            ),
        ],
    );
    let events = run(&provider(&model), ask("claude-tools")).await;
    assert_eq!(
        calls_of(&events),
        [
            (
                "toolu_a".into(),
                "weather".into(),
                json!({"city": "Zürich"})
            ),
            ("toolu_b".into(), "time".into(), json!({"zone": "CET"})),
        ]
    );
    assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
}

#[tokio::test]
async fn the_request_carries_system_tools_and_tool_results_as_blocks() {
    let model = ScriptedModel::start().await;
    model.script(
        "claude-body",
        vec![Reply::tool_call("t", "echo", json!({})), Reply::text("ok")],
    );
    let mut request = ask("claude-body");
    request.system = Some("be brief".into());
    request.tools = vec![ToolSpec {
        name: "echo".into(),
        description: "echoes".into(),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }];
    request.messages.extend([
        ChatMessage::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "toolu_1".into(),
                name: "echo".into(),
                arguments: r#"{"q":"x"}"#.into(),
                provider_metadata: None,
            }],
        },
        ChatMessage::Tool {
            tool_call_id: "toolu_1".into(),
            content: r#"{"echo":"x"}"#.into(),
        },
    ]);
    let events = run(&provider(&model), request).await;
    assert_eq!(text_of(&events), "ok", "the step after tool results");
    let body = &model.requests("claude-body")[0];
    assert_eq!(body["system"], "be brief");
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["tools"][0]["name"], "echo");
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "{\"echo\":\"x\"}"}]})
    );
}

#[tokio::test]
async fn an_overloaded_answer_is_retried_after_the_wait_it_asks() {
    let model = ScriptedModel::start().await;
    model.script(
        "claude-busy",
        vec![Reply::error(529, "Overloaded").retry_after(0)],
    );
    let err = failure(&provider(&model), ask("claude-busy")).await;
    assert!(
        matches!(&err, ProviderError::Status { status: 529, message } if message.starts_with("Overloaded")),
        "{err}"
    );
    assert_eq!(model.request_count("claude-busy"), 3, "tried three times");
}

#[tokio::test]
async fn a_wait_longer_than_allowed_fails_at_once_naming_it() {
    let model = ScriptedModel::start().await;
    model.script(
        "claude-limited",
        vec![Reply::error(429, "rate limited").retry_after(60)],
    );
    let err = failure(&provider(&model), ask("claude-limited")).await;
    assert!(
        matches!(&err, ProviderError::Status { status: 429, message }
            if message == "rate limited (retry after 60 s)"),
        "{err}"
    );
    assert_eq!(model.request_count("claude-limited"), 1);
}
