#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Each model provider adapter against the scripted model speaking its wire
//! format, over real HTTP: what the adapter reads from the stream, and what
//! it sends.

mod anthropic;
mod google;
mod openai;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value};
use toolserver_harness::outbound::{self, OutboundPolicy};
use toolserver_harness::provider::{
    ChatMessage, FinishReason, ModelEvent, ModelProvider, ModelRequest, ProviderError,
    ProviderHttp, Usage,
};

fn http(allow_private: bool) -> ProviderHttp {
    let policy = OutboundPolicy { allow_private };
    ProviderHttp {
        client: outbound::client(&policy, Duration::from_secs(2)).unwrap(),
        policy,
        max_retry_wait: Duration::from_secs(1),
    }
}

fn ask(model_id: &str) -> ModelRequest {
    ModelRequest {
        model_id: model_id.into(),
        system: None,
        messages: vec![ChatMessage::User {
            content: "hi".into(),
        }],
        tools: Vec::new(),
        provider_tools: Vec::new(),
        options: Map::new(),
        idempotency_key: None,
    }
}

/// How `provider` refused `request` before streaming.
async fn failure(provider: &dyn ModelProvider, request: ModelRequest) -> ProviderError {
    match provider.stream(request).await {
        Ok(_) => panic!("the request was not refused"),
        Err(err) => err,
    }
}

async fn run(provider: &dyn ModelProvider, request: ModelRequest) -> Vec<ModelEvent> {
    let stream = provider.stream(request).await.unwrap();
    stream.map(Result::unwrap).collect().await
}

fn text_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::TextDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Each call's (id, name, parsed arguments), in order of starting.
fn calls_of(events: &[ModelEvent]) -> Vec<(String, String, Value)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for event in events {
        match event {
            ModelEvent::ToolCallStart { id, name } => {
                calls.push((id.clone(), name.clone(), String::new()));
            }
            ModelEvent::ToolCallDelta { id, delta } => {
                let call = calls.iter_mut().find(|call| &call.0 == id).unwrap();
                call.2.push_str(delta);
            }
            _ => {}
        }
    }
    calls
        .into_iter()
        .map(|(id, name, arguments)| (id, name, serde_json::from_str(&arguments).unwrap()))
        .collect()
}

fn finish_of(events: &[ModelEvent]) -> (FinishReason, Usage) {
    let finishes: Vec<_> = events
        .iter()
        .filter(|event| matches!(event, ModelEvent::Finish { .. }))
        .collect();
    assert_eq!(finishes.len(), 1, "{events:?}");
    match events.last() {
        Some(ModelEvent::Finish { reason, usage }) => (*reason, *usage),
        other => panic!("the last event is not the finish: {other:?}"),
    }
}
