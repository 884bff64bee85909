//! The messages of turn streams on a conversation's subject, in order: a
//! stream's `open` message, then `chunks` messages, then one `end` message
//! (which may carry the last chunks). Every message names its stream and
//! the index of its first chunk in headers; the payload is a JSON array of
//! the chunk texts (empty for `open`).

use async_nats::HeaderMap;
use bytes::Bytes;
use uuid::Uuid;

use super::LogError;

/// The header naming a message's turn stream.
const STREAM: &str = "Toolserver-Stream";
/// The header naming a message's kind.
const KIND: &str = "Toolserver-Kind";
/// The header naming the index of a message's first chunk.
const INDEX: &str = "Toolserver-Index";
/// The header naming how many chunks a message carries.
const COUNT: &str = "Toolserver-Count";

/// What a message is to its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The stream starts here.
    Open,
    /// Chunks of the stream.
    Chunks,
    /// The stream's last chunks (maybe none): it ends here.
    End,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Chunks => "chunks",
            Self::End => "end",
        }
    }

    fn parse(raw: &str) -> Option<Self> {
        match raw {
            "open" => Some(Self::Open),
            "chunks" => Some(Self::Chunks),
            "end" => Some(Self::End),
            _ => None,
        }
    }
}

/// Who writes a message; part of its deduplication id, so a retry is
/// recognised as a duplicate of the same writer's message only, never of
/// another writer's message at the same index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    /// The stream's recorder.
    Recorder,
    /// A process finishing the stream of a recorder that died.
    Finisher,
}

/// A message to publish.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    stream: Uuid,
    kind: Kind,
    index: i32,
    /// The chunks, each already encoded as a JSON string.
    encoded: Vec<String>,
    writer: Writer,
}

impl Outgoing {
    /// The `open` message of `stream`.
    pub(crate) fn open(stream: Uuid) -> Self {
        Self {
            stream,
            kind: Kind::Open,
            index: 0,
            encoded: Vec::new(),
            writer: Writer::Recorder,
        }
    }

    /// A message of `stream` carrying `piece` (from [`pieces`]) from chunk
    /// `index` on.
    pub(crate) fn chunks(
        stream: Uuid,
        kind: Kind,
        index: i32,
        piece: Vec<String>,
        writer: Writer,
    ) -> Self {
        Self {
            stream,
            kind,
            index,
            encoded: piece,
            writer,
        }
    }

    /// How many chunks it carries.
    pub(crate) fn count(&self) -> i32 {
        i32::try_from(self.encoded.len()).unwrap_or(i32::MAX)
    }

    /// Its deduplication id (`Nats-Msg-Id`): the stream, the index of its
    /// first chunk, its kind and its writer.
    pub(crate) fn message_id(&self) -> String {
        let writer = match self.writer {
            Writer::Recorder => "",
            Writer::Finisher => ":orphan",
        };
        format!(
            "{}:{}:{}{writer}",
            self.stream,
            self.index,
            self.kind.as_str()
        )
    }

    /// Its headers (without the publish conditions).
    pub(crate) fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(STREAM, self.stream.to_string().as_str());
        headers.insert(KIND, self.kind.as_str());
        headers.insert(INDEX, self.index.to_string().as_str());
        headers.insert(COUNT, self.encoded.len().to_string().as_str());
        headers
    }

    /// Its payload: the JSON array of its chunk texts.
    pub(crate) fn payload(&self) -> Bytes {
        let mut payload = String::with_capacity(array_len(&self.encoded));
        payload.push('[');
        for (n, chunk) in self.encoded.iter().enumerate() {
            if n > 0 {
                payload.push(',');
            }
            payload.push_str(chunk);
        }
        payload.push(']');
        Bytes::from(payload)
    }
}

/// A message read back (its headers; the payload is read on demand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its turn stream.
    pub(crate) stream: Uuid,
    /// Its kind.
    pub(crate) kind: Kind,
    /// The index of its first chunk.
    pub(crate) index: i32,
    /// How many chunks it carries.
    pub(crate) count: i32,
    /// Its sequence in the JetStream stream.
    pub(crate) sequence: u64,
}

impl Entry {
    /// The entry of a message with `headers` at `sequence`; `None` for a
    /// message this server did not write.
    pub(crate) fn parse(headers: Option<&HeaderMap>, sequence: u64) -> Option<Self> {
        let headers = headers?;
        let value = |name: &str| headers.get(name).map(|value| value.as_str());
        Some(Self {
            stream: Uuid::parse_str(value(STREAM)?).ok()?,
            kind: Kind::parse(value(KIND)?)?,
            index: value(INDEX)?.parse().ok()?,
            count: value(COUNT)?.parse().ok()?,
            sequence,
        })
    }

    /// The index of the chunk after this message's chunks.
    pub(crate) fn next_index(&self) -> i32 {
        self.index.saturating_add(self.count)
    }
}

/// The chunk texts of a message's payload.
pub(crate) fn chunk_texts(payload: &[u8]) -> Result<Vec<String>, LogError> {
    serde_json::from_slice(payload).map_err(|err| {
        LogError::Malformed(format!(
            "a chunk message is not a JSON array of texts: {err}"
        ))
    })
}

/// Splits `chunks` into pieces, each to be one message whose payload fits
/// in `max` bytes; the chunks come encoded as JSON strings. Fails when one
/// chunk alone does not fit.
pub(crate) fn pieces(chunks: &[String], max: usize) -> Result<Vec<Vec<String>>, LogError> {
    let mut pieces = Vec::new();
    let mut piece: Vec<String> = Vec::new();
    let mut size = 2;
    for chunk in chunks {
        let encoded = serde_json::to_string(chunk)
            .map_err(|err| LogError::Malformed(format!("a chunk could not be encoded: {err}")))?;
        if encoded.len() + 2 > max {
            return Err(LogError::ChunkTooLarge {
                bytes: chunk.len(),
                max,
            });
        }
        let added = encoded.len() + usize::from(!piece.is_empty());
        if size + added > max {
            pieces.push(std::mem::take(&mut piece));
            size = 2;
        }
        size += encoded.len() + usize::from(!piece.is_empty());
        piece.push(encoded);
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    Ok(pieces)
}

/// The length of the JSON array of `encoded`.
fn array_len(encoded: &[String]) -> usize {
    2 + encoded.iter().map(String::len).sum::<usize>() + encoded.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn texts(n: usize, len: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:0len$}")).collect()
    }

    #[test]
    fn pieces_fit_the_limit_and_keep_every_chunk_in_order() {
        let chunks = texts(50, 20);
        let max = 100;
        let pieces = pieces(&chunks, max).unwrap();
        assert!(pieces.len() > 1);
        let mut back = Vec::new();
        for piece in &pieces {
            let message = Outgoing::chunks(
                Uuid::nil(),
                Kind::Chunks,
                0,
                piece.clone(),
                Writer::Recorder,
            );
            let payload = message.payload();
            assert!(payload.len() <= max, "{} > {max}", payload.len());
            assert_eq!(payload.len(), array_len(piece));
            back.extend(chunk_texts(&payload).unwrap());
        }
        assert_eq!(back, chunks);
    }

    #[test]
    fn a_chunk_that_cannot_fit_alone_is_refused() {
        let chunks = vec!["small".to_owned(), "x".repeat(200)];
        match pieces(&chunks, 100) {
            Err(LogError::ChunkTooLarge { bytes, max }) => assert_eq!((bytes, max), (200, 100)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn chunk_texts_with_quotes_and_newlines_come_back_unchanged() {
        let chunks = vec![r#"{"type":"text-delta","delta":"a \"quote\"\nline"}"#.to_owned()];
        let piece = pieces(&chunks, 1024).unwrap().remove(0);
        let message = Outgoing::chunks(Uuid::nil(), Kind::End, 3, piece, Writer::Recorder);
        assert_eq!(chunk_texts(&message.payload()).unwrap(), chunks);
        let entry = Entry::parse(Some(&message.headers()), 9).unwrap();
        assert_eq!(entry.kind, Kind::End);
        assert_eq!((entry.index, entry.count, entry.next_index()), (3, 1, 4));
    }

    #[test]
    fn writers_never_share_a_deduplication_id() {
        let stream = Uuid::now_v7();
        let recorder = Outgoing::chunks(stream, Kind::End, 5, Vec::new(), Writer::Recorder);
        let finisher = Outgoing::chunks(stream, Kind::End, 5, Vec::new(), Writer::Finisher);
        assert_ne!(recorder.message_id(), finisher.message_id());
        let chunks = Outgoing::chunks(stream, Kind::Chunks, 5, Vec::new(), Writer::Recorder);
        assert_ne!(chunks.message_id(), recorder.message_id());
    }
}
