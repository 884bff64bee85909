//! Records a turn's chunks before they are shown: the turn writes to
//! [`Recording::chunks`]; the recorder appends what has arrived (in batches,
//! as fast as the chunk store takes them, each but an idle server's first
//! lingering a moment for more: see [`Sink`]) and only then
//! forwards each chunk to the client of this process, if any. The turn's
//! last chunk (`finish` or `abort`) is recorded with the stream's end, once
//! the turn is done: by the turn's own last write when it takes it (see
//! [`Recording::finish_with`]), by the recorder after it otherwise. It
//! watches for a stop asked for in
//! any process, and for the client leaving, and cancels [`Recording::stop`]
//! for the turn to end on.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toolserver_domain::{AccountId, OnDisconnect};
use toolserver_store::turn_streams::{self, Append, Appended};
use uuid::Uuid;

use super::sink::Sink;
use super::{StreamError, StreamHub};
use crate::ui::UiChunk;

/// Appends that fail this many times in a row end the recording.
const APPEND_ATTEMPTS: u32 = 5;
/// The first wait between append attempts (doubled each time).
const APPEND_BACKOFF: Duration = Duration::from_millis(100);

/// A turn's recording, as the turn sees it.
pub struct Recording {
    /// The stream's id (`None` when recording is off).
    pub stream_id: Option<Uuid>,
    /// Where the turn sends its chunks; the stream finishes once every
    /// sender is dropped.
    pub chunks: mpsc::Sender<UiChunk>,
    /// Cancelled when the turn should stop: a stop was asked for, the
    /// client left under [`OnDisconnect::Cancel`], or the chunks can no
    /// longer be recorded.
    pub stop: CancellationToken,
    /// The recorder; ends after the stream has finished.
    done: JoinHandle<()>,
    /// Where the recorder offers the stream's end to the turn.
    ends: oneshot::Receiver<EndOffer>,
}

/// The end of a turn's stream, offered to the turn's last write.
struct EndOffer {
    /// The stream's last append, when the turn's write may record it (a
    /// stream open in Postgres).
    append: Option<Append>,
    /// How the turn's write recorded it; `None`: it did not (or may not
    /// have), and the recorder records it.
    answer: oneshot::Sender<Option<Appended>>,
}

impl Recording {
    /// Ends the recording of a turn that is done and stored: the recorder
    /// records the stream's end and forwards it; resolves once it has.
    pub async fn finish(self) {
        let Self {
            chunks, done, ends, ..
        } = self;
        drop((chunks, ends));
        let _ = done.await;
    }

    /// Ends the recording with the turn's last write: once every chunk
    /// before the stream's end is recorded, `last_write` runs, given that
    /// end when it may record it (a stream open in Postgres), and answers
    /// how it recorded it (`None`: it did not, and the recorder records it
    /// after `last_write`). Resolves once the end is forwarded.
    pub async fn finish_with<W, F>(self, last_write: W)
    where
        W: FnOnce(Option<Append>) -> F,
        F: Future<Output = Option<Appended>>,
    {
        let Self {
            chunks, done, ends, ..
        } = self;
        drop(chunks);
        match ends.await {
            Ok(offer) => {
                let recorded = last_write(offer.append).await;
                let _ = offer.answer.send(recorded);
            }
            Err(_) => {
                last_write(None).await;
            }
        }
        let _ = done.await;
    }
}

/// When a turn's stream is opened (written where readers find it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opens {
    /// Before the turn starts. For a detached turn's run, which readers
    /// wait for (see [`super::follow_held`]): its stream must be found
    /// for as long as the detached turn is unsettled.
    Now,
    /// With its first chunks, in the same write (the Postgres store; a
    /// JetStream stream opens at once), under the given id: the turn's
    /// conversation lease holder, which a stop asked for before the stream
    /// opened names. For a turn whose client is the one that started it: a
    /// resume comes after that client saw chunks.
    WithFirstChunks(Uuid),
}

/// Opens a stream on `account`'s conversation `conversation_id` (whose
/// lease the caller holds), when `opens` says, and starts recording it;
/// recorded chunks go on to `forward` (the client of this process) until
/// it closes. With recording off, chunks go straight on.
pub async fn record(
    hub: &Arc<StreamHub>,
    account: &AccountId,
    conversation_id: &str,
    forward: Option<mpsc::Sender<String>>,
    on_disconnect: OnDisconnect,
    opens: Opens,
) -> Result<Recording, StreamError> {
    let stops = hub.subscribe_stops();
    let sink = Sink::open(hub, account, conversation_id, opens).await?;
    let stream_id = sink.stream_id();
    let (chunks, receiver) = mpsc::channel(hub.settings().max_batch);
    let (offer_end, ends) = oneshot::channel();
    let stop = CancellationToken::new();
    let recorder = Recorder {
        hub: hub.clone(),
        stream_id,
        sink,
        count: 0,
        forward,
        on_disconnect,
        stop: stop.clone(),
        offer_end: Some(offer_end),
    };
    let done = tokio::spawn(recorder.run(receiver, stops));
    Ok(Recording {
        stream_id,
        chunks,
        stop,
        done,
        ends,
    })
}

struct Recorder {
    hub: Arc<StreamHub>,
    stream_id: Option<Uuid>,
    sink: Sink,
    /// Chunks recorded so far.
    count: i32,
    forward: Option<mpsc::Sender<String>>,
    on_disconnect: OnDisconnect,
    stop: CancellationToken,
    /// Where the stream's end is offered to the turn, until it is.
    offer_end: Option<oneshot::Sender<EndOffer>>,
}

impl Recorder {
    async fn run(
        mut self,
        mut receiver: mpsc::Receiver<UiChunk>,
        mut stops: broadcast::Receiver<Uuid>,
    ) {
        let poll = self.hub.settings().poll;
        let mut check = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = Vec::new();
        loop {
            tokio::select! {
                first = receiver.recv() => {
                    let Some(first) = first else { break };
                    let mut batch = std::mem::take(&mut last);
                    if self.gather(first, &mut receiver, &mut batch).await != Gathered::Shows {
                        last = batch;
                        continue;
                    }
                    if !self.append(&batch, false, false).await {
                        self.stop.cancel();
                        while receiver.recv().await.is_some() {}
                        return;
                    }
                }
                stopped = stops.recv() => match stopped {
                    Ok(id) if Some(id) == self.stream_id => self.end_turn("a stop request"),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        check.reset_immediately();
                    }
                    _ => {}
                },
                _ = check.tick() => if !self.keep_alive().await {
                    self.end_turn("its stream being taken for dead");
                    while receiver.recv().await.is_some() {}
                    return;
                },
                () = client_gone(self.forward.as_ref()) => self.client_left(),
            }
        }
        self.end(last).await;
    }

    /// Records the stream's end `last` after the turn's last write: in
    /// that write when the turn takes it, by itself otherwise; then
    /// forwards it.
    async fn end(&mut self, last: Vec<String>) {
        let append = self.sink.end_append(self.count, &last);
        let taken = append.is_some();
        let mut turn_wrote = None;
        if let Some(offer_end) = self.offer_end.take() {
            let (answer, answered) = oneshot::channel();
            if offer_end.send(EndOffer { append, answer }).is_ok() {
                turn_wrote = Some(answered.await.ok().flatten());
            }
        }
        let recorded = match turn_wrote {
            Some(Some(Appended::Recorded { .. })) => {
                self.count += i32::try_from(last.len()).unwrap_or(i32::MAX);
                self.forward(&last).await;
                true
            }
            Some(Some(Appended::Refused)) => false,
            // The turn's write may have recorded the end before failing.
            Some(None) => self.append(&last, true, taken).await,
            None => self.append(&last, true, false).await,
        };
        if !recorded {
            tracing::warn!(stream.id = ?self.stream_id, "could not record the end of a turn stream");
        }
    }

    /// Adds `first` and whatever else has arrived to `batch` (see
    /// [`Self::batch`]); once the stream is open (or while the process's
    /// writers are busy), also what arrives within the linger after it.
    /// A turn whose chunks come in quick bursts so records them in fewer,
    /// larger appends, and its last burst, held for the turn's end, rarely
    /// waits for an append of the same burst still under way.
    async fn gather(
        &self,
        first: UiChunk,
        receiver: &mut mpsc::Receiver<UiChunk>,
        batch: &mut Vec<String>,
    ) -> Gathered {
        let mut gathered = self.batch(first, receiver, batch);
        let settings = self.hub.settings();
        if gathered == Gathered::Ends || settings.linger.is_zero() || !self.sink.lingers(&self.hub)
        {
            return gathered;
        }
        let deadline = tokio::time::Instant::now() + settings.linger;
        while gathered != Gathered::Ends && batch.len() < settings.max_batch {
            match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(next)) => gathered = gathered.and(self.batch(next, receiver, batch)),
                Ok(None) | Err(_) => break,
            }
        }
        gathered
    }

    /// Adds `first` and whatever else has arrived to `batch`, up to the
    /// batch size, and says what the added chunks make of it.
    fn batch(
        &self,
        first: UiChunk,
        receiver: &mut mpsc::Receiver<UiChunk>,
        batch: &mut Vec<String>,
    ) -> Gathered {
        let max = self.hub.settings().max_batch.max(batch.len() + 1);
        let mut gathered = Gathered::of(&first);
        batch.push(chunk_text(&first));
        while batch.len() < max {
            match receiver.try_recv() {
                Ok(chunk) => {
                    gathered = gathered.and(Gathered::of(&chunk));
                    batch.push(chunk_text(&chunk));
                }
                Err(_) => break,
            }
        }
        gathered
    }

    /// Records `batch` (retrying a failing store), then forwards it. False
    /// when it could not be recorded. `retry` says an earlier write of the
    /// same batch failed without an answer.
    async fn append(&mut self, batch: &[String], finish: bool, retry: bool) -> bool {
        let added = i32::try_from(batch.len()).unwrap_or(i32::MAX);
        let mut backoff = APPEND_BACKOFF;
        let mut failed_before = retry;
        for attempt in 1..=APPEND_ATTEMPTS {
            let outcome = self
                .sink
                .append(&self.hub, self.count, batch, finish, failed_before)
                .await;
            match outcome {
                Ok(Appended::Recorded { stop_requested }) => {
                    self.count += added;
                    if stop_requested {
                        self.end_turn("a stop request");
                    }
                    self.forward(batch).await;
                    return true;
                }
                Ok(Appended::Refused) => {
                    tracing::warn!(stream.id = ?self.stream_id, "the turn stream was ended elsewhere (taken for dead as its recorder could not renew it in time, or ended by a newer turn on the conversation); stopping the turn");
                    return false;
                }
                Err(err) if attempt < APPEND_ATTEMPTS && err.is_transient() => {
                    tracing::debug!(stream.id = ?self.stream_id, error = %err, attempt, "recording chunks failed; trying again");
                    failed_before = true;
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(err) => {
                    tracing::error!(stream.id = ?self.stream_id, error = %err, "could not record the turn's chunks; stopping the turn");
                    return false;
                }
            }
        }
        false
    }

    async fn forward(&mut self, batch: &[String]) {
        let Some(client) = &self.forward else { return };
        for chunk in batch {
            if client.send(chunk.clone()).await.is_err() {
                self.client_left();
                return;
            }
        }
    }

    /// Renews the stream's life and acts on a stop asked for; false when
    /// the stream was taken for dead meanwhile.
    async fn keep_alive(&mut self) -> bool {
        let Some(stream_id) = self.stream_id else {
            return true;
        };
        let alive = self.hub.settings().alive;
        match turn_streams::keep_alive(self.hub.pool(), stream_id, alive).await {
            Ok(Some(stop_requested)) => {
                if stop_requested {
                    self.end_turn("a stop request");
                }
                true
            }
            Ok(None) => false,
            Err(err) => {
                tracing::debug!(stream.id = ?self.stream_id, error = %err, "could not renew a turn stream");
                true
            }
        }
    }

    fn client_left(&mut self) {
        self.forward = None;
        if self.on_disconnect == OnDisconnect::Cancel {
            self.end_turn("the client disconnecting");
        } else {
            tracing::debug!(stream.id = ?self.stream_id, "the client left; the turn goes on for a resume to pick up");
        }
    }

    fn end_turn(&self, why: &str) {
        if !self.stop.is_cancelled() {
            tracing::info!(stream.id = ?self.stream_id, reason = why, "stopping the turn");
            self.stop.cancel();
        }
    }
}

/// Resolves when `client` is closed; never without one.
async fn client_gone(client: Option<&mpsc::Sender<String>>) {
    match client {
        Some(client) => client.closed().await,
        None => std::future::pending().await,
    }
}

/// What a batch of chunks holds, which decides when it is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gathered {
    /// Only step boundaries, which show the client nothing: the batch waits
    /// for the next chunk, so a step's start is recorded with what the
    /// model says first, not in a write of its own while the model request
    /// is built and sent (which takes longer as the conversation grows).
    Boundaries,
    /// Something the client is shown: recorded now.
    Shows,
    /// The turn's last chunk: kept until the turn is done (its
    /// conversation stored), to be recorded in one write with the
    /// stream's end.
    Ends,
}

impl Gathered {
    /// What a batch of `chunk` alone holds.
    fn of(chunk: &UiChunk) -> Self {
        match chunk {
            UiChunk::Finish { .. } | UiChunk::Abort => Self::Ends,
            UiChunk::StartStep | UiChunk::FinishStep => Self::Boundaries,
            _ => Self::Shows,
        }
    }

    /// What a batch holds once `later` chunks are added to it.
    fn and(self, later: Self) -> Self {
        match (self, later) {
            (Self::Ends, _) | (_, Self::Ends) => Self::Ends,
            (Self::Boundaries, Self::Boundaries) => Self::Boundaries,
            _ => Self::Shows,
        }
    }
}

fn chunk_text(chunk: &UiChunk) -> String {
    serde_json::to_string(chunk).unwrap_or_else(|_| String::from("{}"))
}
