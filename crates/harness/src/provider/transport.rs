//! What every adapter sends its requests with: the guarded outbound client,
//! the address policy, how long a provider's `Retry-After` may make a pass
//! wait, and the endpoint and trace headers of each request.

use std::time::Duration;

use url::Url;

use super::{ModelRequest, ProviderError};
use crate::metrics;
use crate::outbound::{check_url, OutboundPolicy};
use crate::trace_context;

/// The outbound side shared by every model provider adapter.
#[derive(Clone)]
pub struct ProviderHttp {
    /// The client; should come from [`crate::outbound::client`].
    pub client: reqwest::Client,
    /// Judges each endpoint before a request is sent.
    pub policy: OutboundPolicy,
    /// Longest wait a provider's `Retry-After` may ask for before a retry;
    /// a longer one fails the pass at once with the provider's answer.
    pub max_retry_wait: Duration,
}

impl ProviderHttp {
    /// The setting's default of [`Self::max_retry_wait`].
    pub const DEFAULT_MAX_RETRY_WAIT: Duration = Duration::from_secs(10);

    /// `base` with `segments` appended (whether or not the base ends with a
    /// slash), checked against the outbound policy.
    pub(super) fn endpoint(&self, base: &Url, segments: &[&str]) -> Result<Url, ProviderError> {
        let mut url = base.clone();
        url.path_segments_mut()
            .map_err(|()| {
                ProviderError::Forbidden(format!("the model base URL {base} cannot take a path"))
            })?
            .pop_if_empty()
            .extend(segments);
        check_url(&url, &self.policy).map_err(ProviderError::Forbidden)?;
        Ok(url)
    }

    /// A streaming `POST` of `body` to `url`, carrying the current span's
    /// trace context and, when given, an `Idempotency-Key`.
    pub(super) fn post(
        &self,
        url: &Url,
        body: &EncodedBody,
        idempotency_key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(url.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.0.clone());
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        for (name, value) in trace_context::of(&tracing::Span::current()) {
            request = request.header(name, value);
        }
        request
    }
}

/// A request body encoded once, sent as is by every attempt.
pub(super) struct EncodedBody(bytes::Bytes);

impl EncodedBody {
    /// The body `build` makes of `request`, encoded as JSON, and the
    /// request's idempotency key; the rest of the request is dropped. The
    /// CPU all of it takes counts as building the model request.
    pub(super) fn of(
        request: ModelRequest,
        build: fn(&ModelRequest) -> serde_json::Value,
    ) -> (Self, Option<String>) {
        metrics::model_request_cpu(|| {
            let body = Self(bytes::Bytes::from(build(&request).to_string()));
            (body, request.idempotency_key)
        })
    }
}
