//! Ending the stream of a recorder that died: the orphan end (an error and
//! a finish chunk) in one `end` message, published with the same
//! compare-and-append as the recorder's own messages, so of a dying
//! recorder and a finisher exactly one writes after the stream's last
//! message.

use uuid::Uuid;

use super::message::{pieces, Entry, Kind, Outgoing, Writer};
use super::{JetStreamChunks, LogError, Published};
use crate::stream::orphan_end;

/// Ends tried before giving up on a subject that keeps changing.
const ATTEMPTS: usize = 10;

/// How [`end_orphan`] found the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishedHow {
    /// It ended it.
    Ended,
    /// The log had ended it already (or holds nothing of it any more).
    AlreadyEnded,
}

/// Ends `stream` on `subject` with the orphan end unless its log has
/// ended; call only once its recorder was taken for dead.
pub(crate) async fn end_orphan(
    chunks: &JetStreamChunks,
    subject: &str,
    stream: Uuid,
) -> Result<FinishedHow, LogError> {
    for _ in 0..ATTEMPTS {
        let last = match chunks.last(subject).await? {
            Some(last) if last.stream == stream && last.kind != Kind::End => last,
            _ => return Ok(FinishedHow::AlreadyEnded),
        };
        if let Published::At(_) = publish_orphan_end(chunks, subject, &last).await? {
            return Ok(FinishedHow::Ended);
        }
    }
    Err(LogError::Contended)
}

/// Publishes the orphan end of `last`'s stream right after `last`.
pub(super) async fn publish_orphan_end(
    chunks: &JetStreamChunks,
    subject: &str,
    last: &Entry,
) -> Result<Published, LogError> {
    let piece = pieces(&orphan_end(), chunks.max_payload())?.concat();
    let message = Outgoing::chunks(
        last.stream,
        Kind::End,
        last.next_index(),
        piece,
        Writer::Finisher,
    );
    chunks.publish(subject, &message, last.sequence).await
}
