//! The HTTP shape of an AI SDK UI message stream (protocol v1): server-sent
//! events `data: <chunk>`, a final `data: [DONE]`, and the headers the AI SDK
//! and proxies expect.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, StreamExt};
use tokio::sync::mpsc;

/// A response carrying `chunks` (JSON texts) until the channel closes, then
/// `[DONE]`; a comment every `keep_alive` while nothing else is sent.
pub fn ui_message_stream(chunks: mpsc::Receiver<String>, keep_alive: Duration) -> Response {
    let events = stream::unfold(chunks, |mut chunks| async move {
        let chunk = chunks.recv().await?;
        Some((Ok::<_, Infallible>(Event::default().data(chunk)), chunks))
    })
    .chain(stream::once(async { Ok(Event::default().data("[DONE]")) }));
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        ("x-vercel-ai-ui-message-stream", "v1"),
        ("x-accel-buffering", "no"),
        ("cache-control", "no-cache"),
    ] {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}
