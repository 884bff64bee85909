//! The answer of a conversation that is with people: a model that says the
//! agent's held message and nothing else, so every front-end streams and
//! stores it like any turn, and the model is not asked.

use async_trait::async_trait;
use futures::stream::{self, StreamExt};

use crate::provider::{
    FinishReason, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, Usage,
};

/// Answers every pass with one fixed text.
pub struct HeldAnswer {
    message: String,
}

impl HeldAnswer {
    /// Answers with `message`.
    pub fn new(message: &str) -> Self {
        Self {
            message: message.to_owned(),
        }
    }
}

#[async_trait]
impl ModelProvider for HeldAnswer {
    async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let events = [
            ModelEvent::TextDelta(self.message.clone()),
            ModelEvent::Finish {
                reason: FinishReason::Stop,
                usage: Usage::default(),
            },
        ];
        Ok(stream::iter(events.map(Ok)).boxed())
    }
}
