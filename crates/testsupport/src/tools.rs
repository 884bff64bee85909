//! A running server's tool routes over HTTP: uploading a tool from its
//! source and invoking it.

use base64::Engine;
use serde_json::{json, Value};

use crate::http::request_json;

/// The body uploading tool `name` with `source` as its bundle, `schema` as
/// its input schema and `{"greeting": "hi"}` as its default config.
pub fn upload_body(name: &str, source: &str, schema: Value) -> Value {
    json!({
        "name": name,
        "description": format!("the {name} tool"),
        "inputSchema": schema,
        "defaultConfig": {"greeting": "hi"},
        "bundle": base64::engine::general_purpose::STANDARD.encode(source),
    })
}

/// Uploads tool `name` ([`upload_body`]) to the server at `base` with
/// `token`; its `toolId`.
///
/// # Panics
/// Unless the server answers `201` with a `toolId`.
pub async fn upload(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    name: &str,
    source: &str,
    schema: Value,
) -> String {
    let url = format!("{base}/accounts/me/tools");
    let body = upload_body(name, source, schema);
    let (status, body) = request_json(client, reqwest::Method::POST, &url, token, Some(body)).await;
    assert_eq!(status, 201, "uploading {name}: {body}");
    body["toolId"].as_str().expect("a toolId").to_owned()
}

/// Invokes `tool` on the server at `base` with `token` and `body`
/// (`{"input": …}` and any options); the response as it came.
///
/// # Panics
/// When the server does not answer.
pub async fn invoke(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    tool: &str,
    body: &Value,
) -> reqwest::Response {
    client
        .post(format!("{base}/accounts/me/tools/{tool}/invoke"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("the server answers")
}
