//! Closing the connection after an error answered before the request's
//! body was read.
//!
//! A request refused before its body is read (a missing token, an unusable
//! URL, a timeout) leaves the body's bytes on the connection. Hyper drains
//! what has already arrived and otherwise closes the connection, but only
//! after the answer's head went out as keep-alive, so a client that sends
//! its next request on the same connection at once (the MCP SDKs'
//! discovery does: a refused `POST /mcp`, then a `GET` of the metadata)
//! can see the connection close under it. Such an answer says
//! `Connection: close` instead, and the client opens a new one.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// Adds `Connection: close` to an HTTP/1 error answer whose request body
/// was not read to its end (HTTP/2 has no such header: a stream's unread
/// body does not hold up the next one).
pub async fn close_after_unread_body(request: Request, next: Next) -> Response {
    let http1 = matches!(request.version(), Version::HTTP_10 | Version::HTTP_11);
    if !http1 || request.body().is_end_stream() {
        return next.run(request).await;
    }
    let ended = Arc::new(AtomicBool::new(false));
    let watched = ended.clone();
    let request = request.map(|inner| {
        Body::new(Watched {
            inner,
            ended: watched,
        })
    });
    let mut response = next.run(request).await;
    let status = response.status();
    let refused = status.is_client_error() || status.is_server_error();
    if refused && !ended.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body that notes when it has been read to its end.
struct Watched {
    inner: Body,
    ended: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
