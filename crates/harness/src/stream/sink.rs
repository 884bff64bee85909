//! Where one turn's recorder puts its chunks: nowhere (recording off), the
//! Postgres rows of its stream (through the process's stream writers), or
//! its conversation's JetStream subject. Either way the stream has its row
//! in Postgres: opened here, or for Postgres by the first append (in the
//! same statement) when the turn's own client is its only early reader.

use toolserver_domain::AccountId;
use toolserver_store::turn_streams::{self, Append, Appended, Opening};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::jetstream::TurnLog;
use super::writer::StreamLoad;
use super::{orphan_end, ChunkStore, Opens, StreamError, StreamHub};

/// Where one turn's chunks go.
pub(super) enum Sink {
    /// Straight to the client: recording is off.
    Unrecorded,
    /// Rows of the stream in Postgres.
    Postgres {
        /// The stream.
        id: Uuid,
        /// The stream's row, until an append has opened it (the first
        /// append opens the stream in the same statement).
        opening: Option<Opening>,
        /// Its part in the writers' load.
        load: StreamLoad,
    },
    /// Messages of the stream on its conversation's JetStream subject.
    JetStream(Uuid, Box<TurnLog>),
}

impl Sink {
    /// Opens a stream on `account`'s conversation `conversation_id` in the
    /// hub's chunk store, finishing any older one whose recorder died: a
    /// stream in JetStream at once (its log first), one in Postgres as
    /// `opens` says.
    pub(super) async fn open(
        hub: &StreamHub,
        account: &AccountId,
        conversation_id: &str,
        opens: Opens,
    ) -> Result<Self, StreamError> {
        if !hub.settings().record {
            return Ok(Self::Unrecorded);
        }
        let id = match opens {
            Opens::WithFirstChunks(id) => id,
            Opens::Now => Uuid::now_v7(),
        };
        let opening = |log_start| Opening {
            id,
            account: account.clone(),
            conversation_id: conversation_id.to_owned(),
            log_start,
            alive: hub.settings().alive,
        };
        match &hub.settings().chunks {
            ChunkStore::Postgres => {
                let opening = match opens {
                    Opens::WithFirstChunks(_) => Some(opening(None)),
                    Opens::Now => {
                        open_now(hub, opening(None)).await?;
                        None
                    }
                };
                Ok(Self::Postgres {
                    id,
                    opening,
                    load: hub.writer().stream_load(),
                })
            }
            ChunkStore::JetStream(chunks) => {
                let log = TurnLog::open(chunks, account, conversation_id, id).await?;
                let start = i64::try_from(log.start()).ok();
                open_now(hub, opening(start)).await?;
                Ok(Self::JetStream(id, Box::new(log)))
            }
        }
    }

    /// The stream's id (`None` when recording is off).
    pub(super) fn stream_id(&self) -> Option<Uuid> {
        match self {
            Self::Unrecorded => None,
            Self::Postgres { id, .. } | Self::JetStream(id, _) => Some(*id),
        }
    }

    /// Whether a batch should linger for more chunks before it is
    /// recorded: a Postgres stream's, once the stream is open or while its
    /// writers are busy (when they are not, a stream's first batch, which
    /// opens it, goes at once: the client's first chunk waits for it).
    pub(super) fn lingers(&self, hub: &StreamHub) -> bool {
        match self {
            Self::Postgres { opening, .. } => opening.is_none() || hub.writer().busy(),
            Self::Unrecorded | Self::JetStream(..) => false,
        }
    }

    /// The stream's end `batch`, whose first chunk has index `from`, as an
    /// append another write may record (see [`Recording::finish_with`]):
    /// for a stream open in Postgres, when the batch has chunks.
    ///
    /// [`Recording::finish_with`]: super::Recording::finish_with
    pub(super) fn end_append(&self, from: i32, batch: &[String]) -> Option<Append> {
        match self {
            Self::Postgres {
                id, opening: None, ..
            } if !batch.is_empty() => Some(Append {
                stream: *id,
                from,
                chunks: batch.to_vec(),
                finish: true,
                opening: None,
            }),
            _ => None,
        }
    }

    /// Records `batch`, whose first chunk has index `from` (with `finish`,
    /// the stream's last); `retry` says an earlier try of the same append
    /// failed without an answer.
    pub(super) async fn append(
        &mut self,
        hub: &StreamHub,
        from: i32,
        batch: &[String],
        finish: bool,
        retry: bool,
    ) -> Result<Appended, StreamError> {
        match self {
            Self::Unrecorded => Ok(Appended::Recorded {
                stop_requested: false,
            }),
            Self::Postgres {
                id: stream,
                opening,
                load,
            } => {
                let append = Append {
                    stream: *stream,
                    from,
                    chunks: batch.to_vec(),
                    finish,
                    opening: opening.clone(),
                };
                load.asked();
                let answer = hub.writer().append(append).await?;
                let appended = match answer.appended {
                    Appended::Refused if retry => {
                        let added = i32::try_from(batch.len()).unwrap_or(i32::MAX);
                        recorded_meanwhile(hub, *stream, from, added).await?
                    }
                    appended => appended,
                };
                if appended != Appended::Refused {
                    if let Some(opened) = opening.take() {
                        if answer.older_dead {
                            finish_dead(hub, &opened).await?;
                        }
                    }
                }
                Ok(appended)
            }
            Self::JetStream(stream, log) => {
                let appended = log.append(from, batch, finish).await?;
                // The log has ended the stream: its recorder's, or another
                // writer's end.
                let ended = finish || appended == Appended::Refused;
                if ended {
                    if let Err(err) = turn_streams::mark_finished(hub.pool(), *stream).await {
                        tracing::warn!(stream.id = %stream, error = %err, "could not mark a turn stream finished; readers find its end in the log");
                    }
                }
                Ok(appended)
            }
        }
    }
}

/// Opens a stream's row through the process's writers, then finishes its
/// conversation's older streams whose recorders died, if any.
async fn open_now(hub: &StreamHub, opening: Opening) -> Result<(), StoreError> {
    if hub.writer().open(opening.clone()).await? {
        finish_dead(hub, &opening).await?;
    }
    Ok(())
}

/// Finishes the streams of the conversation of `opened` whose recorders
/// died, older than the one it opened.
async fn finish_dead(hub: &StreamHub, opened: &Opening) -> Result<(), StoreError> {
    let (account, conversation) = (&opened.account, &opened.conversation_id);
    turn_streams::finish_dead(hub.pool(), account, conversation, &orphan_end()).await
}

/// After a Postgres append whose answer was lost was refused on a retry:
/// whether the lost one was recorded after all (the stream's count moved by
/// exactly `added` from `from` and nothing else writes it).
async fn recorded_meanwhile(
    hub: &StreamHub,
    stream: Uuid,
    from: i32,
    added: i32,
) -> Result<Appended, StoreError> {
    let state = turn_streams::state(hub.pool(), stream).await?;
    let moved_by_it = state.chunk_count == from + added;
    if moved_by_it && (state.live || state.finished) {
        return Ok(Appended::Recorded {
            stop_requested: state.stop_requested,
        });
    }
    Ok(Appended::Refused)
}
