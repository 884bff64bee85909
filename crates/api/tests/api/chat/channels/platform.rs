//! A local stand-in for the platforms' APIs: keeps every post and refuses
//! the next few, as each platform refuses (Slack and Telegram: `200` with
//! `ok: false`; a webhook receiver: `503`).

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// One post the platform received.
#[derive(Debug, Clone)]
pub struct Post {
    /// Its path, without the leading `/`.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// The body's bytes as they came.
    pub raw: Vec<u8>,
}

impl Post {
    /// Its text.
    pub fn text(&self) -> &str {
        self.body["text"].as_str().unwrap_or_default()
    }
}

#[derive(Clone, Default)]
pub struct Platform {
    posts: Arc<Mutex<Vec<Post>>>,
    refusals: Arc<Mutex<usize>>,
}

impl Platform {
    /// A platform on a loopback port, and its base URL.
    pub async fn start() -> (Self, String) {
        let platform = Self::default();
        let app = Router::new()
            .route("/{*path}", post(take))
            .with_state(platform.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (platform, base)
    }

    /// Refuses the next `count` posts.
    pub fn refuse_next(&self, count: usize) {
        *self.refusals.lock().unwrap() = count;
    }

    /// Every post so far.
    pub fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }
}

async fn take(
    State(platform): State<Platform>,
    Path(path): Path<String>,
    headers: HeaderMap,
    raw: axum::body::Bytes,
) -> (StatusCode, Json<Value>) {
    let webhook = path.starts_with("hooks/");
    platform.posts.lock().unwrap().push(Post {
        path,
        headers,
        body: serde_json::from_slice(&raw).unwrap(),
        raw: raw.to_vec(),
    });
    let mut refusals = platform.refusals.lock().unwrap();
    if *refusals > 0 {
        *refusals -= 1;
        let refusal =
            json!({"ok": false, "error": "ratelimited", "description": "Too Many Requests"});
        let status = if webhook {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        return (status, Json(refusal));
    }
    (StatusCode::OK, Json(json!({"ok": true, "result": {}})))
}
