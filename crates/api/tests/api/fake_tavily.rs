//! Tavily's search API, faked on loopback for the web-search tool.

use std::time::Duration;

use serde_json::{json, Value};

/// Tavily's HTTP API, scripted: answers `/search` after a delay and records
/// each request's authorization and body.
pub struct FakeTavily {
    pub url: url::Url,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl FakeTavily {
    pub async fn start(delay: Duration) -> Self {
        use axum::routing::post;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().route(
            "/search",
            post(move |headers: axum::http::HeaderMap, axum::Json(body): axum::Json<Value>| {
                let record = record.clone();
                async move {
                    let auth = headers["authorization"].to_str().unwrap().to_owned();
                    record.lock().unwrap().push((auth, body.clone()));
                    tokio::time::sleep(delay).await;
                    axum::Json(json!({"query": body["query"], "results": [{"title": body["query"], "url": "https://example.com"}]}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = url::Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, seen }
    }

    pub fn requests(&self) -> Vec<(String, Value)> {
        self.seen.lock().unwrap().clone()
    }
}
