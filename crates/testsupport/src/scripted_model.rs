//! A scripted model served over real HTTP (on loopback unless asked
//! otherwise), speaking the OpenAI Chat Completions streaming wire format.
//!
//! Scripts are keyed by model id. The reply to a request is chosen by its
//! step: the number of assistant messages after the last user message. So
//! one script replays for any number of concurrent conversations, and a pass
//! after tool results gets the next reply. A request with no scripted reply
//! is answered 500, so the test fails loudly. Every request body is kept for
//! the test to inspect.
//!
//! A model id can instead be given a responder ([`ScriptedModel::respond_with`]):
//! a function of each request's body and headers that picks the reply, for
//! long runs (e.g. the crash trials) whose replies depend on the request.
//! Requests answered by a responder are not kept; the responder sees each.

mod reply;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{json, Value};

use reply::Answer;
pub use reply::Reply;

/// Picks the reply to one request from its body and headers.
pub type Responder = Arc<dyn Fn(&Value, &HeaderMap) -> Reply + Send + Sync>;

/// Scripts, responders and the requests received, by model id.
#[derive(Default)]
struct Book {
    scripts: HashMap<String, Arc<[Reply]>>,
    responders: HashMap<String, Responder>,
    requests: HashMap<String, Vec<Value>>,
}

type Shared = Arc<Mutex<Book>>;

/// The scripted model server; stops when dropped.
pub struct ScriptedModel {
    base_url: String,
    port: u16,
    book: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl ScriptedModel {
    /// Serves `POST /v1/chat/completions` on a free loopback port.
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

    /// Serves `POST /v1/chat/completions` on a free port of `ip`. With an
    /// unspecified address (`0.0.0.0`) other hosts, such as a cluster's pods,
    /// reach it at one of this host's addresses and [`port`](Self::port);
    /// [`base_url`](Self::base_url) then names loopback.
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
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(book.clone());
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
            base_url: format!("http://{addr}/v1"),
            port: addr.port(),
            book,
            server,
        })
    }

    /// The base URL to configure, e.g. `http://127.0.0.1:40123/v1`.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
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

    /// Answers every request for `model_id` with what `responder` picks from
    /// the request's body and headers, replacing any script or responder
    /// before. Such requests are not kept (see [`Self::requests`]).
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
            .cloned()
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

fn lock(book: &Shared) -> MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The step of a request: assistant messages after the last user message.
fn step(request: &Value) -> usize {
    let messages = request["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let after_user = messages
        .iter()
        .rposition(|message| message["role"] == "user")
        .map_or(0, |last| last + 1);
    messages[after_user..]
        .iter()
        .filter(|message| message["role"] == "assistant")
        .count()
}

async fn complete(
    State(book): State<Shared>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let responder = lock(&book).responders.get(&model).cloned();
    if let Some(responder) = responder {
        return send(&model, &responder(&request, &headers));
    }
    let step = step(&request);
    let reply = {
        let mut book = lock(&book);
        book.requests
            .entry(model.clone())
            .or_default()
            .push(request);
        book.scripts
            .get(&model)
            .and_then(|replies| replies.get(step).cloned())
    };
    let Some(reply) = reply else {
        let message = format!("no scripted reply for model {model} step {step}");
        return error(500, json!({"error": {"message": message}}));
    };
    send(&model, &reply)
}

/// Answers with `reply`: an SSE stream of its chunks, or its error.
fn send(model: &str, reply: &Reply) -> Response {
    match reply.answer(model) {
        Answer::Error { status, body } => error(status, body),
        Answer::Stream {
            frames,
            first_delay,
            chunk_delay,
        } => {
            let events = futures::stream::iter(frames.into_iter().enumerate()).then(
                move |(at, frame)| async move {
                    pause(if at == 0 { first_delay } else { chunk_delay }).await;
                    Ok::<_, Infallible>(Event::default().data(frame))
                },
            );
            Sse::new(events).into_response()
        }
    }
}

fn error(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(body)).into_response()
}

async fn pause(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
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
    async fn start_listens_on_loopback() {
        let model = ScriptedModel::start().await;
        assert_eq!(
            model.base_url(),
            format!("http://127.0.0.1:{}/v1", model.port())
        );
    }
}
