//! A scripted model served over real HTTP (on loopback unless asked
//! otherwise), speaking three providers' streaming wire formats: OpenAI Chat
//! Completions (`POST /v1/chat/completions`), Anthropic Messages
//! (`POST /v1/messages`) and Google Gemini
//! (`POST /v1beta/models/{model}:streamGenerateContent`).
//!
//! Scripts are keyed by model id, whatever the format asking. The reply to a
//! request is chosen by its step: the number of model turns after the user's
//! last own turn (tool results, which Anthropic and Gemini send back as the
//! user's, are not one). So one script replays for any number of concurrent
//! conversations, and a pass after tool results gets the next reply. A
//! request with no scripted reply is answered 500, so the test fails loudly.
//! Every request's body and headers are kept for the test to inspect.
//!
//! A model id can instead be given a responder ([`ScriptedModel::respond_with`]):
//! a function of each request's body and headers that picks the reply, for
//! long runs (e.g. the crash trials) whose replies depend on the request.
//! Requests answered by a responder are not kept; the responder sees each.

mod anthropic;
mod book;
mod frame;
mod gemini;
mod openai;
mod reply;
mod routes;
mod wire;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::http::HeaderMap;
use serde_json::Value;

use book::{lock, Shared};
pub use gemini::thought_signature;
pub use reply::Reply;

/// Prompt tokens every streamed reply reports.
const PROMPT_TOKENS: u64 = 10;

/// Picks the reply to one request from its body and headers.
pub type Responder = Arc<dyn Fn(&Value, &HeaderMap) -> Reply + Send + Sync>;

/// The scripted model server; stops when dropped.
pub struct ScriptedModel {
    origin: String,
    port: u16,
    book: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl ScriptedModel {
    /// Serves the three formats on a free loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST)).await
    }

    /// [`Self::start`], with the failure to bind returned instead.
    pub async fn try_start() -> std::io::Result<Self> {
        Self::try_start_on(IpAddr::V4(Ipv4Addr::LOCALHOST)).await
    }

    /// Serves the three formats on a free port of `ip`. With an unspecified
    /// address (`0.0.0.0`) other hosts, such as a cluster's pods, reach it at
    /// one of this host's addresses and [`port`](Self::port);
    /// [`origin`](Self::origin) and the base URLs then name loopback.
    ///
    /// # Panics
    /// When no port of `ip` can be bound.
    pub async fn start_on(ip: IpAddr) -> Self {
        Self::try_start_on(ip)
            .await
            .expect("bind a port for the scripted model")
    }

    /// [`Self::start_on`], with the failure to bind returned instead.
    pub async fn try_start_on(ip: IpAddr) -> std::io::Result<Self> {
        let book = Shared::default();
        let app = routes::router(book.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0)).await?;
        let mut addr = listener.local_addr()?;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            origin: format!("http://{addr}"),
            port: addr.port(),
            book,
            server,
        })
    }

    /// The server's origin, e.g. `http://127.0.0.1:40123`: the base URL of
    /// the providers' SDKs, which add the API version themselves.
    pub fn origin(&self) -> String {
        self.origin.clone()
    }

    /// The OpenAI base URL to configure, e.g. `http://127.0.0.1:40123/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.origin)
    }

    /// The Anthropic base URL, e.g. `http://127.0.0.1:40123/v1`
    /// (`/messages` follows).
    pub fn anthropic_base_url(&self) -> String {
        format!("{}/v1", self.origin)
    }

    /// The Gemini base URL, e.g. `http://127.0.0.1:40123/v1beta`
    /// (`/models/{model}:streamGenerateContent` follows).
    pub fn gemini_base_url(&self) -> String {
        format!("{}/v1beta", self.origin)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the replies of `model_id`, one per step, replacing any before.
    pub fn script(&self, model_id: &str, replies: Vec<Reply>) {
        let mut book = lock(&self.book);
        book.responders.remove(model_id);
        book.scripts.insert(model_id.to_owned(), replies.into());
    }

    /// Answers every request for `model_id`, in any format, with what
    /// `responder` picks from the request's body and headers, replacing any
    /// script or responder before. Such requests are not kept (see
    /// [`Self::requests`]).
    pub fn respond_with<F>(&self, model_id: &str, responder: F)
    where
        F: Fn(&Value, &HeaderMap) -> Reply + Send + Sync + 'static,
    {
        let mut book = lock(&self.book);
        book.scripts.remove(model_id);
        book.responders
            .insert(model_id.to_owned(), Arc::new(responder));
    }

    /// Every request body received for `model_id`, in arrival order.
    pub fn requests(&self, model_id: &str) -> Vec<Value> {
        lock(&self.book)
            .requests
            .get(model_id)
            .map(|received| received.iter().map(|r| r.body.clone()).collect())
            .unwrap_or_default()
    }

    /// The headers of every request received for `model_id`, in arrival
    /// order (e.g. `x-api-key`, `anthropic-version`, `x-goog-api-key`).
    pub fn request_headers(&self, model_id: &str) -> Vec<HeaderMap> {
        lock(&self.book)
            .requests
            .get(model_id)
            .map(|received| received.iter().map(|r| r.headers.clone()).collect())
            .unwrap_or_default()
    }

    /// How many requests `model_id` received.
    pub fn request_count(&self, model_id: &str) -> usize {
        lock(&self.book).requests.get(model_id).map_or(0, Vec::len)
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn an_unspecified_address_listens_everywhere_and_names_loopback() {
        let model = ScriptedModel::start_on(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).await;
        assert_eq!(
            model.base_url(),
            format!("http://127.0.0.1:{}/v1", model.port())
        );
        model.script("m", vec![Reply::text("hello")]);
        let response = reqwest::Client::new()
            .post(format!("{}/chat/completions", model.base_url()))
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .expect("the model answers");
        assert_eq!(response.status(), 200);
        assert!(response.text().await.expect("a body").contains("hello"));
        assert_eq!(model.request_count("m"), 1);
    }

    #[tokio::test]
    async fn a_responder_picks_each_reply_from_the_body_and_headers() {
        let model = ScriptedModel::start().await;
        model.respond_with("r", |body, headers| {
            let key = headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none");
            Reply::text(&format!("{} {key}", body["messages"][0]["content"]))
        });
        let client = reqwest::Client::new();
        let url = format!("{}/chat/completions", model.base_url());
        let body = json!({"model": "r", "messages": [{"role": "user", "content": "hi"}]});
        let keyed = client
            .post(&url)
            .header("Idempotency-Key", "job.0")
            .json(&body)
            .send()
            .await
            .expect("the model answers");
        assert!(keyed.text().await.expect("a body").contains("job.0"));
        let plain = client.post(&url).json(&body).send().await.expect("answers");
        assert!(plain.text().await.expect("a body").contains("none"));
        assert_eq!(
            model.request_count("r"),
            0,
            "responder requests are not kept"
        );
        model.script("r", vec![Reply::text("scripted")]);
        let scripted = client.post(&url).json(&body).send().await.expect("answers");
        assert!(scripted.text().await.expect("a body").contains("scripted"));
    }

    #[tokio::test]
    async fn one_script_answers_every_format() {
        let model = ScriptedModel::start().await;
        model.script("m", vec![Reply::error(429, "busy").retry_after(7)]);
        let client = reqwest::Client::new();
        let hi = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let anthropic = format!("{}/messages", model.anthropic_base_url());
        let busy = client
            .post(&anthropic)
            .json(&hi)
            .send()
            .await
            .expect("answers");
        assert_eq!(busy.status(), 429);
        assert_eq!(busy.headers()["retry-after"], "7");
        model.script("m", vec![Reply::text("hello")]);
        let named = client
            .post(&anthropic)
            .json(&hi)
            .send()
            .await
            .expect("answers");
        assert!(named
            .text()
            .await
            .expect("a body")
            .contains("event: message_start"));
        let gemini = format!("{}/models/m", model.gemini_base_url());
        let contents = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let streamed = client
            .post(format!("{gemini}:streamGenerateContent?alt=sse"))
            .json(&contents)
            .send()
            .await
            .expect("answers");
        assert!(streamed.text().await.expect("a body").contains("hello"));
        let other = client
            .post(format!("{gemini}:countTokens"))
            .json(&contents)
            .send()
            .await
            .expect("answers");
        assert_eq!(other.status(), 404);
        assert_eq!(model.request_count("m"), 3);
    }

    #[tokio::test]
    async fn start_listens_on_loopback() {
        let model = ScriptedModel::start().await;
        assert_eq!(
            model.base_url(),
            format!("http://127.0.0.1:{}/v1", model.port())
        );
        assert_eq!(model.origin(), format!("http://127.0.0.1:{}", model.port()));
    }
}
