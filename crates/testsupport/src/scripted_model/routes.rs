//! The HTTP routes of the three formats and the answer to each request:
//! its reply from the script (or the responder), sent as a stream or an
//! error.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::Value;

use super::book::{lock, Received, Shared};
use super::gemini::STREAM_METHOD;
use super::wire::{Answer, Format};
use super::Reply;

/// OpenAI's and Anthropic's routes under `/v1`, Gemini's under `/v1beta`.
pub(super) fn router(book: Shared) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(openai))
        .route("/v1/messages", post(anthropic))
        .route("/v1beta/models/{call}", post(gemini))
        .with_state(book)
}

async fn openai(
    State(book): State<Shared>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    respond(&book, Format::OpenAi, &model, request, headers)
}

async fn anthropic(
    State(book): State<Shared>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    respond(&book, Format::Anthropic, &model, request, headers)
}

/// `{model}:streamGenerateContent`; any other method is not found.
async fn gemini(
    State(book): State<Shared>,
    Path(call): Path<String>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    match call.rsplit_once(':') {
        Some((model, STREAM_METHOD)) => respond(&book, Format::Gemini, model, request, headers),
        _ => {
            let missing = Reply::error(404, &format!("models/{call} is not found"));
            send(Format::Gemini, &missing, "")
        }
    }
}

/// Answers with the responder's pick, or with the script's reply for the
/// request's step (a 500 when there is none) after keeping the request.
fn respond(
    book: &Shared,
    format: Format,
    model: &str,
    request: Value,
    headers: HeaderMap,
) -> Response {
    let responder = lock(book).responders.get(model).cloned();
    if let Some(responder) = responder {
        return send(format, &responder(&request, &headers), model);
    }
    let step = format.step(&request);
    let reply = {
        let mut book = lock(book);
        book.requests
            .entry(model.to_owned())
            .or_default()
            .push(Received {
                body: request,
                headers,
            });
        book.scripts
            .get(model)
            .and_then(|replies| replies.get(step).cloned())
    };
    let reply = reply.unwrap_or_else(|| {
        Reply::error(
            500,
            &format!("no scripted reply for model {model} step {step}"),
        )
    });
    send(format, &reply, model)
}

/// Answers with `reply` in `format`: an SSE stream of its frames, or its
/// error.
fn send(format: Format, reply: &Reply, model: &str) -> Response {
    match format.answer(reply, model) {
        Answer::Error {
            status,
            body,
            retry_after,
        } => error(status, body, retry_after),
        Answer::Stream {
            frames,
            first_delay,
            chunk_delay,
        } => {
            let events = futures::stream::iter(frames.into_iter().enumerate()).then(
                move |(at, frame)| async move {
                    pause(if at == 0 { first_delay } else { chunk_delay }).await;
                    let event = Event::default().data(frame.data);
                    Ok::<_, Infallible>(match frame.event {
                        Some(name) => event.event(name),
                        None => event,
                    })
                },
            );
            Sse::new(events).into_response()
        }
    }
}

fn error(status: u16, body: Value, retry_after: Option<u64>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

async fn pause(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}
