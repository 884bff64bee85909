//! Turn streams over real HTTP: every chunk recorded before it is shown, a
//! resume that replays the running turn and follows it, `startIndex`, stop
//! from another connection, `onDisconnect`, detached turns followed live,
//! and CORS. What the modules share: an SSE reader, an agent that calls a
//! tool then answers, and the resume and stop requests.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::support::*;

mod cors;
mod recording;
mod replay;
mod stopping;

const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

fn ms_schema() -> Value {
    json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]})
}

/// Reads SSE frames from a response as they come.
struct Frames {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    /// The JSON chunks read so far.
    chunks: Vec<Value>,
    /// Whether `[DONE]` was read.
    done: bool,
}

impl Frames {
    fn new(response: reqwest::Response) -> Self {
        Self {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
            chunks: Vec::new(),
            done: false,
        }
    }

    /// Reads until a chunk of type `kind` has been read (or the end).
    async fn until(&mut self, kind: &str) {
        while !self.chunks.iter().any(|c| c["type"] == kind) && self.read().await {}
    }

    /// Reads to the end of the stream; panics if it does not end with `[DONE]`.
    async fn read_to_end(&mut self) -> Vec<Value> {
        while self.read().await {}
        assert!(
            self.done,
            "the stream ended without [DONE]: {:?}",
            self.chunks
        );
        self.chunks.clone()
    }

    /// Reads one piece; false at the end.
    async fn read(&mut self) -> bool {
        let next = tokio::time::timeout(Duration::from_secs(30), self.body.next())
            .await
            .expect("the stream stalled for 30 s");
        let Some(piece) = next else { return false };
        self.buffer
            .push_str(&String::from_utf8_lossy(&piece.expect("a body piece")));
        while let Some(end) = self.buffer.find("\n\n") {
            let event: String = self.buffer.drain(..end + 2).collect();
            let event = event.trim();
            if event.starts_with(':') || event.is_empty() {
                continue;
            }
            let data = event.strip_prefix("data: ").expect("a data frame");
            assert!(!self.done, "a frame after [DONE]: {data}");
            if data == "[DONE]" {
                self.done = true;
            } else {
                self.chunks
                    .push(serde_json::from_str(data).expect("a JSON chunk"));
            }
        }
        true
    }
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks.iter().map(|c| c["type"].as_str().unwrap()).collect()
}

/// An agent whose turn calls the uploaded tool `tool` named `name` (with
/// `input`) and then answers in text; `extra` adds config fields.
async fn tool_then_text(
    app: &TestApp,
    model: &str,
    (tool, name): (&str, &str),
    input: Value,
    extra: Value,
) -> String {
    app.model.script(
        model,
        vec![
            Reply::tool_call("call_1", name, input),
            Reply::text("all done, thanks for waiting").chunk_delay(Duration::from_millis(20)),
        ],
    );
    let mut config = app.agent_config(model, json!({ tool: {} }));
    for (key, value) in extra.as_object().into_iter().flatten() {
        config[key] = value.clone();
    }
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": model, "config": config})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["agentId"].as_str().unwrap().to_owned()
}

async fn resume(app: &TestApp, agent: &str, conversation: &str, query: &str) -> reqwest::Response {
    app.client
        .get(format!(
            "{}/agents/{agent}/chat/{conversation}/stream{query}",
            app.base()
        ))
        .bearer_auth(token(ACCOUNT_A))
        .send()
        .await
        .unwrap()
}

async fn stop(app: &TestApp, account: &str, agent: &str, conversation: &str) -> (u16, Value) {
    app.request(
        reqwest::Method::POST,
        &format!("/agents/{agent}/chat/{conversation}/stop"),
        account,
        None,
    )
    .await
}
