//! `tavilySearch` and `tavilyExtract`: Tavily's HTTP API. The account's key
//! comes from the agent config; the server's key is the fallback.

use futures::StreamExt;
use serde_json::{json, Map, Value};
use toolserver_domain::Secret;
use url::Url;

use super::{Failure, Invocation, ToolEvent, ToolEvents, ToolImpl};
use crate::outbound::{check_url, OutboundPolicy};

/// Where Tavily is and the service-wide fallback key.
#[derive(Debug, Clone)]
pub struct TavilySettings {
    /// API base, e.g. `https://api.tavily.com`.
    pub base_url: Url,
    /// Used when an agent config carries no key.
    pub fallback_api_key: Option<Secret>,
}

/// Which Tavily endpoint a tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// `POST /search`.
    Search,
    /// `POST /extract`.
    Extract,
}

impl Endpoint {
    pub(super) fn description(self) -> &'static str {
        match self {
            Self::Search => {
                "Search the web. Returns the most relevant results with their URLs and content."
            }
            Self::Extract => "Extract the readable content of one or more web pages by URL.",
        }
    }

    pub(super) fn input_schema(self) -> Value {
        match self {
            Self::Search => json!({
                "type": "object",
                "properties": {"query": {"type": "string", "minLength": 1, "description": "What to search for"}},
                "required": ["query"],
                "additionalProperties": false,
            }),
            Self::Extract => json!({
                "type": "object",
                "properties": {"urls": {
                    "type": "array", "minItems": 1, "maxItems": 20,
                    "items": {"type": "string", "format": "uri"},
                    "description": "Pages to extract",
                }},
                "required": ["urls"],
                "additionalProperties": false,
            }),
        }
    }

    fn path(self) -> &'static str {
        match self {
            Self::Search => "search",
            Self::Extract => "extract",
        }
    }

    /// The request body: the model's input plus the account's options in Tavily's spelling.
    fn body(self, input: &Value, options: &Map<String, Value>) -> Value {
        let mut body = input.as_object().cloned().unwrap_or_default();
        for (option, wire) in [
            ("searchDepth", "search_depth"),
            ("maxResults", "max_results"),
            ("topic", "topic"),
            ("includeDomains", "include_domains"),
            ("excludeDomains", "exclude_domains"),
            ("extractDepth", "extract_depth"),
        ] {
            if let Some(value) = options.get(option) {
                body.insert(wire.into(), value.clone());
            }
        }
        Value::Object(body)
    }
}

/// One Tavily tool, bound to its key and options.
#[derive(Clone)]
pub(super) struct TavilyTool {
    pub(super) endpoint: Endpoint,
    pub(super) client: reqwest::Client,
    pub(super) base_url: Url,
    pub(super) api_key: String,
    pub(super) options: Map<String, Value>,
    pub(super) policy: OutboundPolicy,
}

impl TavilyTool {
    async fn request(&self, input: &Value) -> Result<Value, String> {
        let mut url = self.base_url.clone();
        url.path_segments_mut()
            .map_err(|()| "the Tavily base URL cannot take a path".to_owned())?
            .pop_if_empty()
            .push(self.endpoint.path());
        check_url(&url, &self.policy)?;
        let response = self
            .client
            .post(url)
            .bearer_auth(&self.api_key)
            .json(&self.endpoint.body(input, &self.options))
            .send()
            .await
            .map_err(|err| format!("Tavily could not be reached: {err}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|err| format!("Tavily answered {status} with an unreadable body: {err}"))?;
        if !status.is_success() {
            let detail = body
                .pointer("/detail/error")
                .or_else(|| body.get("detail"))
                .or_else(|| body.get("error"))
                .cloned()
                .unwrap_or(Value::Null);
            return Err(format!("Tavily answered {status}: {detail}"));
        }
        Ok(body)
    }
}

impl ToolImpl for TavilyTool {
    fn call(&self, invocation: Invocation) -> ToolEvents {
        let tool = self.clone();
        futures::stream::once(async move {
            match tool.request(&invocation.input).await {
                Ok(body) => ToolEvent::Output(body),
                Err(message) => ToolEvent::Failed(Failure::tool(message)),
            }
        })
        .boxed()
    }
}
