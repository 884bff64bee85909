//! The Google Gemini adapter:
//! `POST {base}/models/{model}:streamGenerateContent?alt=sse` (base
//! `https://generativelanguage.googleapis.com/v1beta` by default),
//! authenticated by `x-goog-api-key`. It runs the provider-defined
//! `googleSearch` tool, whose grounding sources reach the stream.

mod body;
mod decode;

use async_trait::async_trait;
use url::Url;

use super::transport::{EncodedBody, ProviderHttp};
use super::{send, sse, ModelProvider, ModelRequest, ModelStream, ProviderError};

/// A Gemini API endpoint.
pub struct GoogleProvider {
    http: ProviderHttp,
    base_url: Url,
    api_key: Option<String>,
}

impl GoogleProvider {
    /// The setting's default endpoint.
    pub const DEFAULT_BASE_URL: &'static str = "https://generativelanguage.googleapis.com/v1beta";

    /// An adapter for the API at `base_url`, sending `api_key` as
    /// `x-goog-api-key` when given.
    pub fn new(http: ProviderHttp, base_url: Url, api_key: Option<String>) -> Self {
        Self {
            http,
            base_url,
            api_key,
        }
    }
}

#[async_trait]
impl ModelProvider for GoogleProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let model = request
            .model_id
            .strip_prefix("models/")
            .unwrap_or(&request.model_id);
        let method = format!("{model}:streamGenerateContent");
        let mut url = self.http.endpoint(&self.base_url, &["models", &method])?;
        url.query_pairs_mut().append_pair("alt", "sse");
        let (body, key) = EncodedBody::of(request, body::body);
        let key = key.as_deref();
        let response = send::send(self.http.max_retry_wait, || {
            let post = self.http.post(&url, &body, key);
            match &self.api_key {
                Some(api_key) => post.header("x-goog-api-key", api_key),
                None => post,
            }
        })
        .await?;
        Ok(sse::events(response, decode::Decoder::default()))
    }
}
