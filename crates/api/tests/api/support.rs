//! What tests share besides the app: accounts and their tokens, tool
//! upload bodies, in-process replies, and turn streams parsed.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde_json::{json, Value};
use toolserver_api::auth::{AuthSettings, Authenticator, KeySource};

pub const SECRET: &str = "test-secret";
pub const ACCOUNT_A: &str = "acct_a";
pub const ACCOUNT_B: &str = "acct_b";

/// HS256 verification with [`SECRET`].
pub fn hs256_auth() -> Authenticator {
    let keys = KeySource::Static(Arc::new(DecodingKey::from_secret(SECRET.as_bytes())));
    Authenticator::new(&hs256_settings(), keys)
}

/// An in-process answer: status, headers and body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: bytes::Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `error.code` of an error body.
    pub fn code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap().to_owned()
    }

    /// The `error.message` of an error body.
    pub fn message(&self) -> String {
        self.json()["error"]["message"].as_str().unwrap().to_owned()
    }
}

pub fn hs256_settings() -> AuthSettings {
    AuthSettings {
        algorithm: Algorithm::HS256,
        issuer: None,
        audience: None,
        account_claim: "account_id".into(),
        leeway: std::time::Duration::from_secs(0),
    }
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub const BUNDLE: &[u8] =
    b"export default { async execute(ctx, input) { return { echo: input }; } };";

/// A valid JSON upload body.
pub fn manifest(name: &str, bundle: &[u8]) -> Value {
    json!({
        "name": name,
        "description": "Echoes its input.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "defaultConfig": {"greeting": "hi"},
        "bundle": b64(bundle),
    })
}

pub fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// An HS256 token for `account` valid for an hour.
pub fn token(account: &str) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        json!({"account_id": account, "exp": now() + 3600}),
        None,
    )
}

/// A token of account A acting for end user `sub`.
pub fn user_token(sub: &str) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        serde_json::json!({"account_id": ACCOUNT_A, "sub": sub, "exp": now() + 3600}),
        None,
    )
}

pub fn sign(alg: Algorithm, key: &EncodingKey, claims: Value, kid: Option<&str>) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

/// A multipart body with the given parts; returns (content type, body).
pub fn multipart(parts: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "toolserver-test-boundary";
    let mut body = Vec::new();
    for (name, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        body.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A request as account A with a body of `content_type`.
pub fn authed(method: Method, path: &str, content_type: &str, body: Vec<u8>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(
            header::AUTHORIZATION,
            format!("Bearer {}", token(ACCOUNT_A)),
        )
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap()
}

/// One response of a turn: status, headers and the parsed `data:` frames.
pub struct Turn {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
    /// Every JSON chunk, in order (the final `[DONE]` excluded).
    pub chunks: Vec<Value>,
}

impl Turn {
    pub fn types(&self) -> Vec<String> {
        self.chunks
            .iter()
            .map(|c| c["type"].as_str().unwrap().to_owned())
            .collect()
    }

    pub fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.chunks.iter().filter(|c| c["type"] == kind).collect()
    }

    pub fn text(&self) -> String {
        self.of_type("text-delta")
            .iter()
            .map(|c| c["delta"].as_str().unwrap())
            .collect()
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// The body `useChat` sends for a new user message.
pub fn user_turn(conversation: &str, text: &str) -> Value {
    json!({
        "id": conversation,
        "messages": [{"id": uuid::Uuid::new_v4().to_string(), "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    })
}

/// Splits an SSE body into its JSON chunks, checking the framing: every
/// event is `data: <json>` (or a `:` comment), and the last is `[DONE]`.
pub fn parse_frames(body: &str) -> Vec<Value> {
    let events: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .collect();
    let mut chunks = Vec::new();
    let mut done = false;
    for event in events {
        if event.starts_with(':') {
            continue;
        }
        let data = event
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not a data frame: {event:?}"));
        assert!(!done, "a frame after [DONE]: {data}");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        chunks.push(serde_json::from_str(data).unwrap());
    }
    assert!(done, "the stream did not end with [DONE]:\n{body}");
    chunks
}
