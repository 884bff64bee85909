//! The Gemini adapter.

use serde_json::json;
use toolserver_harness::provider::google::GoogleProvider;
use toolserver_harness::provider::{
    ChatMessage, FinishReason, ModelEvent, ProviderError, ToolCall,
};
use toolserver_testsupport::scripted_model::thought_signature;
use toolserver_testsupport::{Reply, ScriptedModel};

use super::{ask, calls_of, failure, finish_of, http, run, text_of};

fn provider(model: &ScriptedModel) -> GoogleProvider {
    let base = url::Url::parse(&model.gemini_base_url()).unwrap();
    GoogleProvider::new(http(true), base, Some("goog-test".into()))
}

#[tokio::test]
async fn text_and_grounding_sources_stream_with_usage() {
    let model = ScriptedModel::start().await;
    model.script(
        "gemini-search",
        vec![Reply::text("Rust 1.95 is out.")
            .and_source("https://blog.rust-lang.org/", "Rust Blog")
            .and_source("https://releases.rs/", "Releases")],
    );
    let mut request = ask("gemini-search");
    request.provider_tools = vec!["googleSearch".into()];
    let events = run(&provider(&model), request).await;
    assert_eq!(text_of(&events), "Rust 1.95 is out.");
    let sources: Vec<(&str, Option<&str>)> = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::Source { url, title, .. } => Some((url.as_str(), title.as_deref())),
            _ => None,
        })
        .collect();
    assert_eq!(
        sources,
        [
            ("https://blog.rust-lang.org/", Some("Rust Blog")),
            ("https://releases.rs/", Some("Releases"))
        ]
    );
    let (reason, usage) = finish_of(&events);
    assert_eq!(reason, FinishReason::Stop);
    assert_eq!(usage.input_tokens, 10);
    assert!(usage.output_tokens > 0);
    let body = &model.requests("gemini-search")[0];
    assert_eq!(body["tools"], json!([{"googleSearch": {}}]));
    assert_eq!(
        body["contents"],
        json!([{"role": "user", "parts": [{"text": "hi"}]}])
    );
    assert_eq!(
        model.request_headers("gemini-search")[0]["x-goog-api-key"],
        "goog-test"
    );
}

#[tokio::test]
async fn parallel_calls_come_whole_and_results_answer_by_name() {
    let model = ScriptedModel::start().await;
    model.script(
        "gemini-tools",
        vec![
            Reply::tool_call("ignored", "weather", json!({"city": "Oslo"})).and_tool_call(
                "ignored",
                "time",
                json!({}),
            ),
            Reply::text("Cold."),
        ],
    );
    let events = run(&provider(&model), ask("gemini-tools")).await;
    let calls = calls_of(&events);
    assert_eq!(calls.len(), 2, "{events:?}");
    assert_eq!(
        (calls[0].1.as_str(), &calls[0].2),
        ("weather", &json!({"city": "Oslo"}))
    );
    assert_eq!((calls[1].1.as_str(), &calls[1].2), ("time", &json!({})));
    assert_ne!(calls[0].0, calls[1].0, "each call has its own id");
    assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
    let signed: Vec<(&String, &serde_json::Value)> = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::ToolCallMetadata { id, metadata } => Some((id, metadata)),
            _ => None,
        })
        .collect();
    let signature = json!({"google": {"thoughtSignature": thought_signature("ignored")}});
    assert_eq!(
        signed,
        [(&calls[0].0, &signature)],
        "the first call is signed"
    );

    let mut next = ask("gemini-tools");
    next.messages.extend([
        ChatMessage::Assistant {
            content: String::new(),
            tool_calls: calls
                .iter()
                .map(|(id, name, arguments)| ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.to_string(),
                    provider_metadata: (id == &calls[0].0).then(|| signature.clone()),
                })
                .collect(),
        },
        ChatMessage::Tool {
            tool_call_id: calls[1].0.clone(),
            content: "\"noon\"".into(),
        },
        ChatMessage::Tool {
            tool_call_id: calls[0].0.clone(),
            content: r#"{"temp":-3}"#.into(),
        },
    ]);
    let events = run(&provider(&model), next).await;
    assert_eq!(text_of(&events), "Cold.");
    let body = &model.requests("gemini-tools")[1];
    assert_eq!(
        body["contents"][1]["parts"][0]["thoughtSignature"],
        thought_signature("ignored"),
        "the signature goes back with its call"
    );
    assert!(body["contents"][1]["parts"][1]
        .get("thoughtSignature")
        .is_none());
    assert_eq!(
        body["contents"][2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "time", "response": {"result": "noon"}}},
            {"functionResponse": {"name": "weather", "response": {"temp": -3}}},
        ]})
    );
}

#[tokio::test]
async fn an_error_answer_carries_the_status_and_message() {
    let model = ScriptedModel::start().await;
    model.script("gemini-bad", vec![Reply::error(400, "API key not valid")]);
    let err = failure(&provider(&model), ask("gemini-bad")).await;
    assert!(
        matches!(&err, ProviderError::Status { status: 400, message } if message == "API key not valid"),
        "{err}"
    );
    assert_eq!(model.request_count("gemini-bad"), 1);
}

#[tokio::test]
async fn an_unavailable_answer_is_retried_after_the_wait_it_asks_and_a_long_wait_is_not() {
    let model = ScriptedModel::start().await;
    model.script(
        "gemini-busy",
        vec![Reply::error(503, "The model is overloaded").retry_after(0)],
    );
    let err = failure(&provider(&model), ask("gemini-busy")).await;
    assert!(
        matches!(&err, ProviderError::Status { status: 503, .. }),
        "{err}"
    );
    assert_eq!(model.request_count("gemini-busy"), 3, "tried three times");

    model.script(
        "gemini-quota",
        vec![Reply::error(429, "Resource exhausted").retry_after(120)],
    );
    let err = failure(&provider(&model), ask("gemini-quota")).await;
    assert!(
        matches!(&err, ProviderError::Status { status: 429, message }
            if message == "Resource exhausted (retry after 120 s)"),
        "{err}"
    );
    assert_eq!(model.request_count("gemini-quota"), 1);
}
