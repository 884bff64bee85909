//! The Anthropic Messages adapter: `POST {base}/messages` with `stream: true`
//! (base `https://api.anthropic.com/v1` by default), authenticated by
//! `x-api-key` and pinned to one `anthropic-version`. The answer's typed
//! server-sent events are decoded as they arrive.

mod body;
mod decode;

use async_trait::async_trait;
use url::Url;

use super::transport::{EncodedBody, ProviderHttp};
use super::{send, sse, ModelProvider, ModelRequest, ModelStream, ProviderError};

/// The version of the Messages API this adapter speaks.
const API_VERSION: &str = "2023-06-01";

/// A Messages API endpoint.
pub struct AnthropicProvider {
    http: ProviderHttp,
    base_url: Url,
    api_key: Option<String>,
}

impl AnthropicProvider {
    /// The setting's default endpoint.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com/v1";

    /// An adapter for the API at `base_url`, sending `api_key` as
    /// `x-api-key` when given.
    pub fn new(http: ProviderHttp, base_url: Url, api_key: Option<String>) -> Self {
        Self {
            http,
            base_url,
            api_key,
        }
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let url = self.http.endpoint(&self.base_url, &["messages"])?;
        let (body, key) = EncodedBody::of(request, body::body);
        let key = key.as_deref();
        let response = send::send(self.http.max_retry_wait, || {
            let post = self
                .http
                .post(&url, &body, key)
                .header("anthropic-version", API_VERSION);
            match &self.api_key {
                Some(api_key) => post.header("x-api-key", api_key),
                None => post,
            }
        })
        .await?;
        Ok(sse::events(response, decode::Decoder::default()))
    }
}
