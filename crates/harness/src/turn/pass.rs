//! One model pass: streams the model's text and tool-call arguments to the
//! client as they arrive, and collects the calls it made.

use futures::StreamExt;

use super::emitter::{ClientGone, Emitter};
use crate::provider::{FinishReason, ModelEvent, ModelProvider, ModelRequest, Usage};
use crate::ui::UiChunk;

/// A tool call as the model wrote it.
#[derive(Debug, Clone)]
pub(super) struct ModelCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
    pub(super) provider_metadata: Option<serde_json::Value>,
}

/// How a pass ended.
pub(super) enum PassEnd {
    /// The model finished; these are its calls.
    Finished {
        calls: Vec<ModelCall>,
        reason: FinishReason,
        usage: Usage,
    },
    /// The provider failed; the message says how.
    Failed(String),
}

/// Runs one pass, emitting text and tool-input chunks.
pub(super) async fn run_pass(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    emitter: &mut Emitter,
) -> Result<PassEnd, ClientGone> {
    let mut stream = tokio::select! {
        started = provider.stream(request) => match started {
            Ok(stream) => stream,
            Err(err) => return Ok(PassEnd::Failed(err.to_string())),
        },
        () = emitter.gone() => return Err(ClientGone),
    };
    let mut text_id: Option<String> = None;
    let mut calls: Vec<ModelCall> = Vec::new();
    let end = loop {
        let event = tokio::select! {
            event = stream.next() => event,
            () = emitter.gone() => return Err(ClientGone),
        };
        match event {
            Some(Ok(ModelEvent::TextDelta(delta))) => {
                if delta.is_empty() {
                    continue;
                }
                let id = match &text_id {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("txt_{}", uuid::Uuid::new_v4().simple());
                        emitter.emit(UiChunk::TextStart { id: id.clone() }).await?;
                        text_id = Some(id.clone());
                        id
                    }
                };
                emitter.emit(UiChunk::TextDelta { id, delta }).await?;
            }
            Some(Ok(ModelEvent::ToolCallStart { id, name })) => {
                emitter
                    .emit(UiChunk::ToolInputStart {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                    })
                    .await?;
                calls.push(ModelCall {
                    id,
                    name,
                    arguments: String::new(),
                    provider_metadata: None,
                });
            }
            Some(Ok(ModelEvent::ToolCallDelta { id, delta })) => {
                if let Some(call) = calls.iter_mut().find(|call| call.id == id) {
                    call.arguments.push_str(&delta);
                    emitter
                        .emit(UiChunk::ToolInputDelta {
                            tool_call_id: id,
                            input_text_delta: delta,
                        })
                        .await?;
                }
            }
            Some(Ok(ModelEvent::ToolCallMetadata { id, metadata })) => {
                if let Some(call) = calls.iter_mut().find(|call| call.id == id) {
                    call.provider_metadata = Some(metadata);
                }
            }
            Some(Ok(ModelEvent::Source { id, url, title })) => {
                emitter
                    .emit(UiChunk::SourceUrl {
                        source_id: id,
                        url,
                        title,
                    })
                    .await?;
            }
            Some(Ok(ModelEvent::Finish { reason, usage })) => {
                break PassEnd::Finished {
                    calls,
                    reason,
                    usage,
                }
            }
            Some(Err(err)) => break PassEnd::Failed(err.to_string()),
            None => break PassEnd::Failed("the model stream ended without finishing".into()),
        }
    };
    if let Some(id) = text_id {
        emitter.emit(UiChunk::TextEnd { id }).await?;
    }
    Ok(end)
}
