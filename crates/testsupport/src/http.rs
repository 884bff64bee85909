//! Talking to a server started by a test or benchmark: free ports, waiting
//! for readiness, tokens, and JSON requests that must succeed.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A free loopback port (free when asked; the server binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Waits until `{base}/readyz` answers 2xx (at most a minute).
pub async fn wait_ready(client: &reqwest::Client, base: &str) {
    let started = Instant::now();
    loop {
        let ready = client.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{base} did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An HS256 bearer token for `account` (claim `account_id`), valid for an hour.
pub fn hs256_token(secret: &str, account: &str) -> String {
    let exp = time::OffsetDateTime::now_utc().unix_timestamp() + 3600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"account_id": account, "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("an HS256 token")
}

/// Sends `method` to `url` with `token` and an optional JSON `body`; returns
/// the status and the answer (JSON, or the text as a JSON string).
pub async fn request_json(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client.request(method, url).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// POSTs `body` with `token` and returns the JSON answer; panics unless 2xx.
pub async fn post_json(client: &reqwest::Client, url: &str, token: &str, body: Value) -> Value {
    let response = client
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("the server answers");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.json().await.expect("a JSON answer")
}
