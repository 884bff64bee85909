//! The OpenAI-compatible Chat Completions adapter.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use toolserver_harness::provider::openai::OpenAiProvider;
use toolserver_harness::provider::{
    ChatMessage, FinishReason, ModelEvent, ModelProvider, ModelRequest, ProviderError, ToolCall,
    ToolSpec, Usage,
};
use toolserver_testsupport::{Reply, ScriptedModel};

use super::{ask, calls_of, finish_of, http, run, text_of};

fn provider(model: &ScriptedModel, allow_private: bool) -> OpenAiProvider {
    let base = url::Url::parse(&model.base_url()).unwrap();
    OpenAiProvider::new(http(allow_private), base, Some("sk-test".into()))
}

#[tokio::test]
async fn a_text_reply_streams_deltas_then_finishes_with_usage() {
    let model = ScriptedModel::start().await;
    model.script("text", vec![Reply::text("Hello there, friend.")]);
    let events = run(&provider(&model, true), ask("text")).await;

    let deltas = events.len() - 1;
    assert!(deltas >= 2, "{events:?}");
    assert_eq!(text_of(&events), "Hello there, friend.");
    let (reason, usage) = finish_of(&events);
    assert_eq!(reason, FinishReason::Stop);
    assert_eq!(
        usage,
        Usage {
            input_tokens: 10,
            output_tokens: deltas as u64
        }
    );
}

#[tokio::test]
async fn a_tool_call_streams_its_arguments_in_pieces() {
    let model = ScriptedModel::start().await;
    let arguments = json!({"q": "weather in Zürich", "days": 3});
    model.script(
        "tool",
        vec![Reply::tool_call("call_1", "echo", arguments.clone())],
    );
    let events = run(&provider(&model, true), ask("tool")).await;

    assert_eq!(
        events[0],
        ModelEvent::ToolCallStart {
            id: "call_1".into(),
            name: "echo".into()
        }
    );
    let pieces = events
        .iter()
        .filter(|event| matches!(event, ModelEvent::ToolCallDelta { .. }))
        .count();
    assert!(pieces >= 2, "{events:?}");
    assert_eq!(
        calls_of(&events),
        [("call_1".into(), "echo".into(), arguments)]
    );
    assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
}

#[tokio::test]
async fn text_and_two_tool_calls_in_one_reply() {
    let model = ScriptedModel::start().await;
    model.script(
        "two",
        vec![Reply::text("Checking both.")
            .and_tool_call("call_a", "weather", json!({"city": "Oslo"}))
            .and_tool_call("call_b", "time", json!({}))],
    );
    let events = run(&provider(&model, true), ask("two")).await;

    assert_eq!(text_of(&events), "Checking both.");
    assert_eq!(
        calls_of(&events),
        [
            ("call_a".into(), "weather".into(), json!({"city": "Oslo"})),
            ("call_b".into(), "time".into(), json!({})),
        ]
    );
    assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
}

#[tokio::test]
async fn an_overridden_finish_reason_is_reported() {
    let model = ScriptedModel::start().await;
    model.script(
        "cut",
        vec![Reply::text("Cut short").finish_reason("length")],
    );
    let events = run(&provider(&model, true), ask("cut")).await;
    assert_eq!(finish_of(&events).0, FinishReason::Length);
}

#[tokio::test]
async fn the_request_body_maps_messages_tools_and_options() {
    let model = ScriptedModel::start().await;
    model.script("mapping", vec![Reply::text("ok")]);
    let options = json!({
        "temperature": 0.2,
        "topP": 0.9,
        "maxOutputTokens": 256,
        "seed": 7,
        "frequencyPenalty": 1.5,
    });
    let request = ModelRequest {
        model_id: "mapping".into(),
        system: Some("Be brief.".into()),
        messages: vec![
            ChatMessage::User {
                content: "Weather?".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "weather".into(),
                    arguments: r#"{"city":"Oslo"}"#.into(),
                    provider_metadata: None,
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: r#"{"sky":"clear"}"#.into(),
            },
            ChatMessage::Assistant {
                content: "It is clear.".into(),
                tool_calls: Vec::new(),
            },
            ChatMessage::User {
                content: "Thanks".into(),
            },
        ],
        tools: vec![ToolSpec {
            name: "weather".into(),
            description: "Current weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        provider_tools: Vec::new(),
        options: options.as_object().unwrap().clone(),
        idempotency_key: None,
    };
    run(&provider(&model, true), request).await;

    let sent = model.requests("mapping");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0],
        json!({
            "model": "mapping",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"sky\":\"clear\"}"},
                {"role": "assistant", "content": "It is clear."},
                {"role": "user", "content": "Thanks"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "weather",
                "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            }}],
            "temperature": 0.2,
            "top_p": 0.9,
            "max_completion_tokens": 256,
            "seed": 7,
        })
    );
}

#[tokio::test]
async fn the_step_after_tool_results_gets_the_next_reply() {
    let model = ScriptedModel::start().await;
    model.script(
        "steps",
        vec![
            Reply::tool_call("call_1", "echo", json!({})),
            Reply::text("Done."),
        ],
    );
    let provider = provider(&model, true);
    let mut request = ask("steps");
    request.messages.push(ChatMessage::Assistant {
        content: String::new(),
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: "echo".into(),
            arguments: "{}".into(),
            provider_metadata: None,
        }],
    });
    request.messages.push(ChatMessage::Tool {
        tool_call_id: "call_1".into(),
        content: "{}".into(),
    });
    let events = run(&provider, request).await;
    assert_eq!(text_of(&events), "Done.");
}

#[tokio::test]
async fn an_error_answer_is_a_status_error_with_the_message() {
    let model = ScriptedModel::start().await;
    model.script("broken", vec![Reply::error(500, "the model fell over")]);
    let err = provider(&model, true)
        .stream(ask("broken"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ProviderError::Status { status: 500, message } if message == "the model fell over"),
        "{err}"
    );
    assert_eq!(model.request_count("broken"), 1);
}

#[tokio::test]
async fn an_unscripted_step_fails_loudly() {
    let model = ScriptedModel::start().await;
    let err = provider(&model, true)
        .stream(ask("unknown"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ProviderError::Status { status: 500, message }
            if message == "no scripted reply for model unknown step 0"),
        "{err}"
    );
}

#[tokio::test]
async fn overloaded_answers_are_retried_twice() {
    let model = ScriptedModel::start().await;
    model.script("busy", vec![Reply::error(503, "overloaded")]);
    let err = provider(&model, true)
        .stream(ask("busy"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ProviderError::Status { status: 503, .. }),
        "{err}"
    );
    assert_eq!(model.request_count("busy"), 3);
}

#[tokio::test]
async fn a_private_base_url_is_refused_before_connecting() {
    let model = ScriptedModel::start().await;
    model.script("private", vec![Reply::text("unreachable")]);
    let err = provider(&model, false)
        .stream(ask("private"))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ProviderError::Forbidden(_)), "{err}");
    assert_eq!(model.request_count("private"), 0);
}

#[tokio::test]
async fn a_private_host_name_is_refused_by_the_resolver() {
    let model = ScriptedModel::start().await;
    let base = model.base_url().replace("127.0.0.1", "localhost");
    let provider = OpenAiProvider::new(http(false), url::Url::parse(&base).unwrap(), None);
    let err = provider.stream(ask("private")).await.err().unwrap();
    assert!(
        matches!(&err, ProviderError::Forbidden(message)
            if message == "localhost resolves only to non-public addresses"),
        "{err}"
    );
    assert_eq!(model.request_count("private"), 0);
}

#[tokio::test]
async fn base_urls_with_and_without_a_trailing_slash_reach_the_endpoint() {
    let model = ScriptedModel::start().await;
    model.script("slash", vec![Reply::text("ok")]);
    for base in [model.base_url(), format!("{}/", model.base_url())] {
        let base = url::Url::parse(&base).unwrap();
        let provider = OpenAiProvider::new(http(true), base, None);
        let events = run(&provider, ask("slash")).await;
        assert_eq!(text_of(&events), "ok");
    }
    assert_eq!(model.request_count("slash"), 2);
}

#[tokio::test]
async fn events_arrive_as_the_model_streams_them() {
    let delay = Duration::from_millis(200);
    let model = ScriptedModel::start().await;
    model.script(
        "slow",
        vec![Reply::text("one two three four five").chunk_delay(delay)],
    );
    let started = Instant::now();
    let mut stream = provider(&model, true).stream(ask("slow")).await.unwrap();
    let mut first_text = None;
    while let Some(event) = stream.next().await {
        if first_text.is_none() && matches!(event.unwrap(), ModelEvent::TextDelta(_)) {
            first_text = Some(started.elapsed());
        }
    }
    let total = started.elapsed();
    let first_text = first_text.unwrap();
    // Role chunk, five words, finish, usage and [DONE]: eight waits.
    assert!(total >= delay * 8, "the whole stream took {total:?}");
    assert!(
        first_text < total / 2,
        "the first text came after {first_text:?} of {total:?}"
    );
}
