//! Reads a conversation's active turn stream from a chunk index and follows
//! it live until it finishes, from any process, from wherever it was
//! recorded (Postgres rows here; JetStream in [`super::jetstream`]). A
//! stream whose turn lost its conversation (its server died) is finished
//! here, with an error.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use toolserver_domain::AccountId;
use toolserver_store::turn_streams::{self, StreamState};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::jetstream::{self, LogError, Reading};
use super::{orphan_end, ChunkStore, Notice, StreamError, StreamHub};

/// Chunks read in one query.
const PAGE: i64 = 256;
/// Chunks buffered for a slow reader.
const BUFFER: usize = 256;

/// A turn stream being followed.
pub struct Followed {
    /// The stream's id.
    pub stream_id: Uuid,
    /// The index of the last chunk recorded when following began (-1: none).
    pub tail_index: i64,
    /// The index of the first chunk `chunks` yields.
    pub start_index: i64,
    /// The chunks (JSON texts) from `start_index` on, ending when the stream
    /// has finished and every chunk was read.
    pub chunks: mpsc::Receiver<String>,
}

/// Follows the active stream of `account`'s conversation `conversation_id`
/// from `start_index` (negative: counted back from the end; `None`: from
/// the start); `None` when no turn streams there.
pub async fn follow(
    hub: &Arc<StreamHub>,
    account: &AccountId,
    conversation_id: &str,
    start_index: Option<i64>,
) -> Result<Option<Followed>, StreamError> {
    let notices = hub.subscribe();
    let Some(state) = turn_streams::latest(hub.pool(), account, conversation_id).await? else {
        return Ok(None);
    };
    if state.finished {
        return Ok(None);
    }
    if let Some(log_start) = state.log_start {
        let from = Logged {
            stream: state.id,
            log_start,
            start_index,
        };
        return follow_log(hub, account, conversation_id, from).await;
    }
    let count = i64::from(state.chunk_count);
    let start = start_from(start_index, count);
    let (sender, chunks) = mpsc::channel(BUFFER);
    let stream_id = state.id;
    tokio::spawn(read_followed(hub.clone(), state, start, sender, notices));
    Ok(Some(Followed {
        stream_id,
        tail_index: count - 1,
        start_index: start,
        chunks,
    }))
}

/// A stream recorded in JetStream, to follow from `start_index`.
struct Logged {
    stream: Uuid,
    log_start: i64,
    start_index: Option<i64>,
}

/// Follows a stream recorded in JetStream; `None` once its log has ended.
async fn follow_log(
    hub: &Arc<StreamHub>,
    account: &AccountId,
    conversation_id: &str,
    from: Logged,
) -> Result<Option<Followed>, StreamError> {
    let ChunkStore::JetStream(log) = &hub.settings().chunks else {
        return Err(LogError::Unavailable(
            "the turn stream was recorded in NATS JetStream, which this server is not configured with".into(),
        )
        .into());
    };
    let subject = log.subject(account, conversation_id);
    let Some(tail) = jetstream::tail(log, &subject, from.stream).await? else {
        return Ok(None);
    };
    let start = start_from(from.start_index, tail + 1);
    let (sender, chunks) = mpsc::channel(BUFFER);
    let reading = Reading {
        subject,
        stream: from.stream,
        log_start: u64::try_from(from.log_start).unwrap_or(1),
        start,
    };
    tokio::spawn(jetstream::read(hub.clone(), log.clone(), reading, sender));
    Ok(Some(Followed {
        stream_id: from.stream,
        tail_index: tail,
        start_index: start,
        chunks,
    }))
}

/// The index a read starts from: `start_index` (negative: counted back
/// from `count` chunks; `None`: the start).
fn start_from(start_index: Option<i64>, count: i64) -> i64 {
    match start_index {
        None => 0,
        Some(index) if index < 0 => (count + index).max(0),
        Some(index) => index,
    }
}

/// Counts this reader as the stream's follower (so its appends are
/// announced) while it reads.
async fn read_followed(
    hub: Arc<StreamHub>,
    state: StreamState,
    start: i64,
    out: mpsc::Sender<String>,
    notices: broadcast::Receiver<Notice>,
) {
    let stream = state.id;
    let counted = match turn_streams::add_follower(hub.pool(), stream).await {
        Ok(()) => true,
        Err(err) => {
            tracing::debug!(stream.id = %stream, error = %err, "could not count a follower; reading by the periodic check");
            false
        }
    };
    read_on(hub.clone(), state, start, out, notices).await;
    if counted {
        if let Err(err) = turn_streams::remove_follower(hub.pool(), stream).await {
            tracing::debug!(stream.id = %stream, error = %err, "could not uncount a follower");
        }
    }
}

async fn read_on(
    hub: Arc<StreamHub>,
    state: StreamState,
    start: i64,
    out: mpsc::Sender<String>,
    mut notices: broadcast::Receiver<Notice>,
) {
    let stream = state.id;
    // Any index a client may ask for: one past the last chunk there can be
    // waits, like one past the last chunk there is, for the stream's end.
    let mut next = start;
    loop {
        let page = match turn_streams::chunks(hub.pool(), stream, next, PAGE).await {
            Ok(page) => page,
            Err(err) => {
                tracing::debug!(stream.id = %stream, error = %err, "reading a turn stream failed; trying again");
                if !wait(&hub, stream, &out, &mut notices).await {
                    return;
                }
                continue;
            }
        };
        let full = page.len() as i64 == PAGE;
        for chunk in page {
            if out.send(chunk).await.is_err() {
                return;
            }
            next = next.saturating_add(1);
        }
        if full {
            continue;
        }
        let state = match turn_streams::state(hub.pool(), stream).await {
            Ok(state) => state,
            Err(StoreError::NotFound) => return,
            Err(err) => {
                tracing::debug!(stream.id = %stream, error = %err, "checking a turn stream failed; trying again");
                if !wait(&hub, stream, &out, &mut notices).await {
                    return;
                }
                continue;
            }
        };
        if next < i64::from(state.chunk_count) {
            continue;
        }
        if state.finished {
            return;
        }
        if !state.live {
            match turn_streams::finish_orphan(hub.pool(), stream, &orphan_end()).await {
                Ok(true) => {
                    tracing::info!(stream.id = %stream, "finished the stream of a turn whose server stopped");
                }
                Ok(false) => {}
                Err(err) => {
                    tracing::debug!(stream.id = %stream, error = %err, "could not finish an orphaned stream");
                }
            }
            continue;
        }
        if !wait(&hub, stream, &out, &mut notices).await {
            return;
        }
    }
}

/// Waits for news of `stream`, or the periodic check; false when the reader
/// has gone.
async fn wait(
    hub: &StreamHub,
    stream: Uuid,
    out: &mpsc::Sender<String>,
    notices: &mut broadcast::Receiver<Notice>,
) -> bool {
    let check = tokio::time::sleep(hub.settings().poll);
    tokio::pin!(check);
    loop {
        tokio::select! {
            () = out.closed() => return false,
            () = &mut check => return true,
            notice = notices.recv() => match notice {
                Ok(Notice::Chunks(id)) if id == stream => return true,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return true,
                Err(broadcast::error::RecvError::Closed) => {
                    check.as_mut().await;
                    return true;
                }
            },
        }
    }
}
