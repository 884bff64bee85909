//! Reading a turn stream from its conversation's subject: an ordered
//! consumer from the stream's `open` message on, skipping nothing of its
//! own until its `end` message. When nothing arrives for the poll interval
//! the reader checks the stream's row, and ends the stream of a recorder
//! taken for dead (its orphan end then arrives like any message).

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use toolserver_store::turn_streams;
use toolserver_store::StoreError;
use uuid::Uuid;

use super::message::{chunk_texts, Entry, Kind};
use super::{end_orphan, FinishedHow, JetStreamChunks, LogError};
use crate::stream::StreamHub;

/// The index of the last chunk of `stream` on `subject` (-1: none yet);
/// `None` once its log has ended.
pub(crate) async fn tail(
    chunks: &JetStreamChunks,
    subject: &str,
    stream: Uuid,
) -> Result<Option<i64>, LogError> {
    Ok(match chunks.last(subject).await? {
        Some(last) if last.stream == stream && last.kind != Kind::End => {
            Some(i64::from(last.next_index()) - 1)
        }
        _ => None,
    })
}

/// A stream to read.
pub(crate) struct Reading {
    /// The conversation's subject.
    pub(crate) subject: String,
    /// The turn stream.
    pub(crate) stream: Uuid,
    /// The sequence of its `open` message.
    pub(crate) log_start: u64,
    /// The index of the first chunk to send.
    pub(crate) start: i64,
}

/// Sends the chunks of `reading` to `out` until its stream ends or `out`
/// closes.
pub(crate) async fn read(
    hub: Arc<StreamHub>,
    chunks: JetStreamChunks,
    reading: Reading,
    out: mpsc::Sender<String>,
) {
    let Reading {
        subject,
        stream,
        log_start,
        start,
    } = reading;
    let poll = hub.settings().poll;
    let mut next_sequence = log_start;
    let mut messages = None;
    let mut finished_seen = false;
    loop {
        let current = match &mut messages {
            Some(current) => current,
            None => match chunks.messages(&subject, next_sequence).await {
                Ok(opened) => messages.insert(opened),
                Err(err) => {
                    tracing::debug!(stream.id = %stream, error = %err, "could not read a turn stream's subject; trying again");
                    tokio::select! {
                        () = out.closed() => return,
                        () = tokio::time::sleep(poll) => continue,
                    }
                }
            },
        };
        let next = tokio::select! {
            () = out.closed() => return,
            next = tokio::time::timeout(poll, current.next()) => next,
        };
        let message = match next {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(err))) => {
                tracing::debug!(stream.id = %stream, error = %err, "reading a turn stream's subject failed; reading again");
                messages = None;
                continue;
            }
            Ok(None) => {
                messages = None;
                continue;
            }
            Err(_) => {
                match check(&hub, &chunks, &subject, stream).await {
                    Check::Gone => return,
                    Check::Finished if finished_seen => return,
                    Check::Finished => finished_seen = true,
                    Check::Going => {}
                }
                continue;
            }
        };
        let sequence = match message.info() {
            Ok(info) => info.stream_sequence,
            Err(err) => {
                tracing::warn!(stream.id = %stream, error = %err, "a turn-stream message without its sequence");
                return;
            }
        };
        next_sequence = sequence + 1;
        let Some(entry) = Entry::parse(message.headers.as_ref(), sequence) else {
            tracing::warn!(stream.id = %stream, sequence, "skipping a message this server did not write on a conversation's subject");
            continue;
        };
        if entry.stream != stream {
            // Nothing of another stream follows this one's open message
            // before its end.
            return;
        }
        if entry.kind == Kind::Open {
            continue;
        }
        let texts = match chunk_texts(&message.payload) {
            Ok(texts) => texts,
            Err(err) => {
                tracing::warn!(stream.id = %stream, error = %err, "could not read a turn stream");
                return;
            }
        };
        for (index, text) in (i64::from(entry.index)..).zip(texts) {
            if index >= start && out.send(text).await.is_err() {
                return;
            }
        }
        if entry.kind == Kind::End {
            return;
        }
    }
}

/// What the row of a stream with nothing new says.
enum Check {
    /// Its row is gone.
    Gone,
    /// It is finished: its end is in the log (or was lost with it).
    Finished,
    /// It is going on (or its recorder was found dead and its stream ended).
    Going,
}

async fn check(hub: &StreamHub, chunks: &JetStreamChunks, subject: &str, stream: Uuid) -> Check {
    let state = match turn_streams::state(hub.pool(), stream).await {
        Ok(state) => state,
        Err(StoreError::NotFound) => return Check::Gone,
        Err(err) => {
            tracing::debug!(stream.id = %stream, error = %err, "checking a turn stream failed; trying again");
            return Check::Going;
        }
    };
    if state.finished {
        return Check::Finished;
    }
    if !state.live {
        finish_orphan(hub, chunks, subject, stream).await;
    }
    Check::Going
}

/// Ends the log of `stream`, whose recorder was taken for dead, and marks
/// it finished.
async fn finish_orphan(hub: &StreamHub, chunks: &JetStreamChunks, subject: &str, stream: Uuid) {
    match end_orphan(chunks, subject, stream).await {
        Ok(FinishedHow::Ended) => {
            tracing::info!(stream.id = %stream, "finished the stream of a turn whose server stopped");
        }
        Ok(FinishedHow::AlreadyEnded) => {}
        Err(err) => {
            tracing::debug!(stream.id = %stream, error = %err, "could not finish an orphaned stream");
            return;
        }
    }
    if let Err(err) = turn_streams::mark_finished(hub.pool(), stream).await {
        tracing::debug!(stream.id = %stream, error = %err, "could not mark an orphaned stream finished");
    }
}
