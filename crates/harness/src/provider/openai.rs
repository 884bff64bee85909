//! The OpenAI-compatible Chat Completions adapter: `POST {base}/chat/completions`
//! with `stream: true`, so OpenAI, vLLM, Ollama, OpenRouter and similar
//! servers all work. The answer is read as server-sent events and handed on
//! event by event as it arrives.

mod body;
mod decode;

use async_trait::async_trait;
use url::Url;

use super::transport::{EncodedBody, ProviderHttp};
use super::{send, sse, ModelProvider, ModelRequest, ModelStream, ProviderError};

/// A Chat Completions endpoint.
pub struct OpenAiProvider {
    http: ProviderHttp,
    base_url: Url,
    api_key: Option<String>,
}

impl OpenAiProvider {
    /// An adapter for the API at `base_url` (e.g. `https://api.openai.com/v1`),
    /// sending `api_key` as a bearer token when given.
    pub fn new(http: ProviderHttp, base_url: Url, api_key: Option<String>) -> Self {
        Self {
            http,
            base_url,
            api_key,
        }
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let url = self
            .http
            .endpoint(&self.base_url, &["chat", "completions"])?;
        let (body, key) = EncodedBody::of(request, body::body);
        let key = key.as_deref();
        let response = send::send(self.http.max_retry_wait, || {
            let post = self.http.post(&url, &body, key);
            match &self.api_key {
                Some(api_key) => post.bearer_auth(api_key),
                None => post,
            }
        })
        .await?;
        Ok(sse::events(response, decode::Decoder::default()))
    }
}
