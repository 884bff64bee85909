//! One turn stream's writer on its conversation's subject. Opening ends
//! whatever stream the subject left unended (its recorder is gone or has
//! lost the conversation) and publishes the `open` message; from then on
//! every append names the sequence of this writer's last message, so it is
//! refused once anyone else has written the subject.

use toolserver_domain::AccountId;
use toolserver_store::turn_streams::Appended;
use uuid::Uuid;

use super::finish::publish_orphan_end;
use super::message::{pieces, Kind, Outgoing, Writer};
use super::{JetStreamChunks, LogError, Published};

/// Opens tried before giving up on a subject that keeps changing.
const OPEN_ATTEMPTS: usize = 10;

/// A turn stream's place in its conversation's log, as its recorder sees
/// it. A copy taken before an append and appended again is a retry after a
/// lost answer (the retry is recognised by its message ids).
#[derive(Debug, Clone)]
pub struct TurnLog {
    chunks: JetStreamChunks,
    subject: String,
    stream: Uuid,
    /// The sequence of the `open` message.
    start: u64,
    /// The sequence of this writer's last message.
    last: u64,
    /// Chunks recorded so far.
    recorded: i32,
}

impl TurnLog {
    /// Opens turn stream `stream` on `account`'s conversation
    /// `conversation_id`, ending the stream left unended there, if any.
    pub async fn open(
        chunks: &JetStreamChunks,
        account: &AccountId,
        conversation_id: &str,
        stream: Uuid,
    ) -> Result<Self, LogError> {
        let subject = chunks.subject(account, conversation_id);
        for _ in 0..OPEN_ATTEMPTS {
            let expected = match chunks.last(&subject).await? {
                None => 0,
                Some(last) if last.kind == Kind::End => last.sequence,
                Some(unended) => {
                    tracing::info!(stream.id = %unended.stream, "ending the unended stream of an earlier turn on the conversation");
                    match publish_orphan_end(chunks, &subject, &unended).await? {
                        Published::At(sequence) => sequence,
                        Published::Refused => continue,
                    }
                }
            };
            let open = Outgoing::open(stream);
            if let Published::At(start) = chunks.publish(&subject, &open, expected).await? {
                return Ok(Self {
                    chunks: chunks.clone(),
                    subject,
                    stream,
                    start,
                    last: start,
                    recorded: 0,
                });
            }
        }
        Err(LogError::Contended)
    }

    /// The sequence of the stream's `open` message, where readers start.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Chunks recorded so far.
    pub fn recorded(&self) -> i32 {
        self.recorded
    }

    /// Records `batch`, whose first chunk has index `from`, in as many
    /// messages as the server's message size needs; with `finish`, the
    /// last message ends the stream. Chunks already recorded by an earlier
    /// try of the same append are skipped. Refused once anyone else has
    /// written the subject.
    pub async fn append(
        &mut self,
        from: i32,
        batch: &[String],
        finish: bool,
    ) -> Result<Appended, LogError> {
        let done = usize::try_from(self.recorded.saturating_sub(from)).unwrap_or(0);
        let rest = batch.get(done..).unwrap_or_default();
        let mut pieces = pieces(rest, self.chunks.max_payload())?;
        if pieces.is_empty() {
            if !finish {
                return Ok(Appended::Recorded {
                    stop_requested: false,
                });
            }
            pieces.push(Vec::new());
        }
        let last_piece = pieces.len() - 1;
        for (n, piece) in pieces.into_iter().enumerate() {
            let kind = match finish && n == last_piece {
                true => Kind::End,
                false => Kind::Chunks,
            };
            let message =
                Outgoing::chunks(self.stream, kind, self.recorded, piece, Writer::Recorder);
            match self
                .chunks
                .publish(&self.subject, &message, self.last)
                .await?
            {
                Published::At(sequence) => {
                    self.last = sequence;
                    self.recorded = self.recorded.saturating_add(message.count());
                }
                Published::Refused => return Ok(Appended::Refused),
            }
        }
        Ok(Appended::Recorded {
            stop_requested: false,
        })
    }
}
