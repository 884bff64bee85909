//! One WebSocket connection: requests multiplexed by `requestId`, each
//! answered by its own task; one writer sends every answer, and a ping
//! whenever the socket has been quiet for the keep-alive period. When the
//! socket closes, every request still answering stops, as a client leaving
//! an HTTP stream would.

use std::collections::HashMap;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures::stream::{SplitSink, StreamExt};
use futures::SinkExt;
use tokio::sync::mpsc;
use tokio::task::{self, JoinSet};
use tokio_util::sync::CancellationToken;
use toolserver_domain::AccountId;
use toolserver_harness::stream::follow_held;

use super::frames::{chat_request, ClientFrame, ServerFrame};
use crate::error::ApiError;
use crate::routes::agents::chat::stream_turn;
use crate::routes::agents::resume::conversation_of_agent;
use crate::state::AppState;

/// Frames queued for the writer.
const OUTBOX: usize = 256;
/// Close code for a frame that is not a protocol request (RFC 6455 1007).
const INVALID_PAYLOAD: u16 = 1007;
/// Close code for a binary frame (RFC 6455 1003).
const UNSUPPORTED_DATA: u16 = 1003;

/// The requests being answered, by `requestId`: how to cancel each, and
/// its task (a finished task frees its id only if the id was not reused).
type Open = HashMap<String, (CancellationToken, task::Id)>;

/// Whom a connection serves.
#[derive(Clone)]
pub struct Peer {
    /// The server.
    pub state: AppState,
    /// The authenticated account.
    pub account: AccountId,
    /// The end user the token names.
    pub user: Option<String>,
    /// The agent the socket was opened for.
    pub agent_id: String,
}

/// Serves `socket` until it closes.
pub async fn serve(socket: WebSocket, peer: Peer) {
    let (sink, mut incoming) = socket.split();
    let (outbox, letters) = mpsc::channel(OUTBOX);
    let keep_alive = peer.state.harness().settings().keep_alive;
    let writer = tokio::spawn(write(sink, letters, keep_alive));
    let mut open = Open::new();
    let mut answering = JoinSet::new();
    let closing = loop {
        tokio::select! {
            Some(done) = answering.join_next_with_id() => {
                let task = match &done {
                    Ok((task, _)) => *task,
                    Err(err) => err.id(),
                };
                open.retain(|_, (_, id)| *id != task);
            }
            message = incoming.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    let frame = match serde_json::from_str::<ClientFrame>(&text) {
                        Ok(frame) => frame,
                        Err(err) => break Some((INVALID_PAYLOAD, format!("not a chat request: {err}"))),
                    };
                    take(frame, &peer, &outbox, &mut open, &mut answering).await;
                }
                Some(Ok(Message::Binary(_))) => {
                    break Some((UNSUPPORTED_DATA, "requests are JSON text frames".to_owned()))
                }
                Some(Ok(Message::Close(_))) | None => break None,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Err(err)) => {
                    tracing::debug!(error = %err, "WebSocket read failed");
                    break None;
                }
            },
        }
    };
    for (cancel, _) in open.values() {
        cancel.cancel();
    }
    answering.shutdown().await;
    if let Some((code, reason)) = closing {
        let frame = CloseFrame {
            code,
            reason: Utf8Bytes::from(truncate(&reason, 120)),
        };
        let _ = outbox.send(Message::Close(Some(frame))).await;
    }
    drop(outbox);
    let _ = writer.await;
}

/// Starts answering `frame`, or answers it at once.
async fn take(
    frame: ClientFrame,
    peer: &Peer,
    outbox: &mpsc::Sender<Message>,
    open: &mut Open,
    answering: &mut JoinSet<String>,
) {
    let request_id = frame.request_id().to_owned();
    if let ClientFrame::Abort { .. } = frame {
        if let Some((cancel, _)) = open.remove(&request_id) {
            cancel.cancel();
        }
        return;
    }
    let refusal = if open.contains_key(&request_id) {
        Some("this requestId is already answering".to_owned())
    } else if open.len() >= peer.state.settings().max_socket_requests {
        Some(format!(
            "at most {} requests answer at once on one socket",
            peer.state.settings().max_socket_requests
        ))
    } else {
        None
    };
    if let Some(refusal) = refusal {
        let text = ServerFrame::Error(refusal.as_str()).to_text(&request_id);
        let _ = outbox.send(Message::Text(text.into())).await;
        return;
    }
    let cancel = CancellationToken::new();
    let answer = Answer {
        peer: peer.clone(),
        request_id: request_id.clone(),
        outbox: outbox.clone(),
        cancel: cancel.clone(),
    };
    let task = answering.spawn(answer.run(frame)).id();
    open.insert(request_id, (cancel, task));
}

/// One request being answered.
struct Answer {
    peer: Peer,
    request_id: String,
    outbox: mpsc::Sender<Message>,
    cancel: CancellationToken,
}

impl Answer {
    /// Answers `frame` until its stream ends, the client aborts it or the
    /// socket closes; returns the request id.
    async fn run(self, frame: ClientFrame) -> String {
        let cancel = self.cancel.clone();
        tokio::select! {
            () = cancel.cancelled() => {}
            () = self.answer(frame) => {}
        }
        self.request_id
    }

    async fn answer(&self, frame: ClientFrame) {
        let Peer {
            state,
            account,
            user,
            agent_id,
        } = &self.peer;
        let outcome = match frame {
            ClientFrame::Send {
                id,
                trigger,
                message_id,
                messages,
                ..
            } => {
                let request = chat_request(id, trigger, message_id, messages);
                match stream_turn(state, (account, user.clone()), agent_id, request).await {
                    Ok(chunks) => {
                        self.forward(chunks, 0).await;
                        Ok(())
                    }
                    Err(err) => Err(err),
                }
            }
            ClientFrame::Resume {
                id, last_sequence, ..
            } => self.resume(&id, last_sequence).await,
            ClientFrame::Abort { .. } => Ok(()),
        };
        if let Err(err) = outcome {
            if matches!(err, ApiError::Internal(_) | ApiError::Unavailable(_)) {
                tracing::error!(error = ?err, "a WebSocket chat request failed");
            }
            let text = describe(&err);
            self.send(ServerFrame::Error(&text)).await;
        }
    }

    /// Replays and follows the conversation's running turn, waiting for the
    /// next run of a detached turn that is between runs; `no-active` when
    /// none comes.
    async fn resume(&self, conversation_id: &str, last: Option<u32>) -> Result<(), ApiError> {
        let Peer {
            state,
            account,
            agent_id,
            ..
        } = &self.peer;
        let Some(conversation) =
            conversation_of_agent(state, account, agent_id, "id", conversation_id).await?
        else {
            self.send(ServerFrame::NoActive).await;
            return Ok(());
        };
        let start = last.map(|last| i64::from(last) + 1);
        let streams = state.lifecycle().streams();
        match follow_held(streams, account, conversation.as_str(), start, None).await? {
            Some(followed) => {
                self.send(ServerFrame::Start).await;
                self.forward(followed.chunks, followed.start_index).await;
            }
            None => {
                self.send(ServerFrame::NoActive).await;
            }
        }
        Ok(())
    }

    /// Sends each chunk with its index from `first`, then `end`.
    async fn forward(&self, mut chunks: mpsc::Receiver<String>, first: i64) {
        let mut sequence = first;
        while let Some(chunk) = chunks.recv().await {
            if !self.send(ServerFrame::Chunk(sequence, &chunk)).await {
                return;
            }
            sequence += 1;
        }
        self.send(ServerFrame::End).await;
    }

    /// Queues `frame`; false once the socket is gone.
    async fn send(&self, frame: ServerFrame<'_>) -> bool {
        let text = frame.to_text(&self.request_id);
        self.outbox.send(Message::Text(text.into())).await.is_ok()
    }
}

/// Sends queued frames, and a ping after each quiet `keep_alive`, until
/// the queue closes or the socket fails.
async fn write(
    mut sink: SplitSink<WebSocket, Message>,
    mut letters: mpsc::Receiver<Message>,
    keep_alive: std::time::Duration,
) {
    loop {
        let message = match tokio::time::timeout(keep_alive, letters.recv()).await {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(_) => Message::Ping(Default::default()),
        };
        let closing = matches!(message, Message::Close(_));
        if sink.send(message).await.is_err() || closing {
            return;
        }
    }
    let _ = sink.close().await;
}

/// An error as the `errorText` of an `error` frame: its code, the field at
/// fault if any, and what was wrong (never an internal cause).
fn describe(err: &ApiError) -> String {
    match err {
        ApiError::BadRequest {
            field: Some(field), ..
        } => format!("{}: {field}: {err}", err.code()),
        ApiError::TooManyRequests(refusal) => format!(
            "{}: {err} (retry after {} ms)",
            err.code(),
            refusal.retry_after.as_millis()
        ),
        _ => format!("{}: {err}", err.code()),
    }
}

/// At most `limit` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, limit: usize) -> String {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
