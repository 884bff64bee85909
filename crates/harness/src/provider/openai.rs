//! The OpenAI-compatible Chat Completions adapter: `POST {base}/chat/completions`
//! with `stream: true`, so OpenAI, vLLM, Ollama, OpenRouter and similar
//! servers all work. The answer is read as server-sent events and handed on
//! event by event as it arrives.

mod body;
mod decode;
mod events;
mod send;

use async_trait::async_trait;
use reqwest::header::ACCEPT;
use serde_json::Value;
use url::Url;

use super::{ModelProvider, ModelRequest, ModelStream, ProviderError};
use crate::outbound::{check_url, OutboundPolicy};
use crate::trace_context;

/// A Chat Completions endpoint.
pub struct OpenAiProvider {
    client: reqwest::Client,
    base_url: Url,
    api_key: Option<String>,
    policy: OutboundPolicy,
}

impl OpenAiProvider {
    /// An adapter for the API at `base_url` (e.g. `https://api.openai.com/v1`),
    /// sending `api_key` as a bearer token when given. `client` should come
    /// from [`crate::outbound::client`]; `policy` judges the base URL.
    pub fn new(
        client: reqwest::Client,
        base_url: Url,
        api_key: Option<String>,
        policy: OutboundPolicy,
    ) -> Self {
        Self {
            client,
            base_url,
            api_key,
            policy,
        }
    }

    /// `{base}/chat/completions`, whether or not the base ends with a slash.
    fn endpoint(&self) -> Result<Url, ProviderError> {
        let mut url = self.base_url.clone();
        url.path_segments_mut()
            .map_err(|()| {
                ProviderError::Forbidden(format!(
                    "the model base URL {} cannot take a path",
                    self.base_url
                ))
            })?
            .pop_if_empty()
            .extend(["chat", "completions"]);
        Ok(url)
    }

    fn request(&self, url: &Url, body: &Value, key: Option<&str>) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(url.clone())
            .header(ACCEPT, "text/event-stream")
            .json(body);
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        for (name, value) in trace_context::of(&tracing::Span::current()) {
            request = request.header(name, value);
        }
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn supports_provider_tool(&self, _name: &str) -> bool {
        false
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let url = self.endpoint()?;
        check_url(&url, &self.policy).map_err(ProviderError::Forbidden)?;
        let body = body::body(&request);
        let response =
            send::send(|| self.request(&url, &body, request.idempotency_key.as_deref())).await?;
        Ok(events::events(response))
    }
}
