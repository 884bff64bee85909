//! Turn-stream chunks kept in NATS JetStream: one JetStream stream per
//! deployment, one subject per conversation, on which each turn stream is
//! an `open` message, batches of chunks, and an `end` message
//! ([`message`]). The Postgres row of a turn stream keeps everything else.
//!
//! Every write is a compare-and-append: it names the sequence of the last
//! message its writer saw on the subject, so once anyone else has written
//! there (a process that took the recorder for dead and ended its stream,
//! or the next turn's recorder) the stale writer is refused; a retry after
//! a lost answer carries the same message id and is recognised as a
//! duplicate, never stored twice.

mod finish;
mod message;
mod reader;
mod subject;
mod turn_log;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::{Ordered, OrderedConfig};
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::context::{Publish, PublishErrorKind};
use async_nats::jetstream::stream::{Config, LastRawMessageErrorKind, StorageType, Stream};
use async_nats::jetstream::{self, Context};
use toolserver_domain::AccountId;

pub(crate) use finish::{end_orphan, FinishedHow};
use message::{Entry, Outgoing};
pub(crate) use reader::{read, tail, Reading};
pub use turn_log::TurnLog;

/// Room left in each message for its headers, in bytes.
const HEADER_ROOM: usize = 1024;
/// Longest window in which a retried message is recognised as a duplicate.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Where the JetStream chunk store keeps its messages; each is a setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamSettings {
    /// The JetStream stream's name (one per deployment).
    pub stream: String,
    /// The prefix of the conversations' subjects; the stream takes
    /// `<prefix>.>`.
    pub subject_prefix: String,
}

impl JetStreamSettings {
    /// The setting's default stream name.
    pub const DEFAULT_STREAM: &'static str = "TOOLSERVER_TURN_CHUNKS";
    /// The setting's default subject prefix.
    pub const DEFAULT_SUBJECT_PREFIX: &'static str = "toolserver.turn-chunks";
}

/// Why the chunk log could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// NATS did not answer, or answered with an error.
    #[error("NATS JetStream is unavailable: {0}")]
    Unavailable(String),
    /// One chunk is larger than a NATS message may be.
    #[error("a chunk of {bytes} bytes does not fit in one NATS message ({max} bytes of payload at most, from the server's max_payload)")]
    ChunkTooLarge {
        /// The chunk's size.
        bytes: usize,
        /// The most a message's chunks may take.
        max: usize,
    },
    /// A message on a conversation's subject is not one this server writes.
    #[error("unreadable turn-stream message: {0}")]
    Malformed(String),
    /// The conversation's subject kept changing under a writer.
    #[error("the conversation's subject kept changing; gave up writing")]
    Contended,
}

impl LogError {
    /// Whether trying again can help.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Contended)
    }
}

fn unavailable(err: impl std::fmt::Display) -> LogError {
    LogError::Unavailable(err.to_string())
}

/// How a compare-and-append went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    /// Stored (or found stored, for a retry) at this sequence.
    At(u64),
    /// Someone else wrote the subject since the sequence it named.
    Refused,
}

/// The chunk store in JetStream: a connected handle on the deployment's
/// stream, cheap to clone.
#[derive(Clone)]
pub struct JetStreamChunks(Arc<Connected>);

struct Connected {
    context: Context,
    stream: Stream<()>,
    settings: JetStreamSettings,
    /// The most payload one message may carry.
    max_payload: usize,
}

impl std::fmt::Debug for JetStreamChunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamChunks")
            .field("settings", &self.0.settings)
            .field("max_payload", &self.0.max_payload)
            .finish()
    }
}

impl JetStreamChunks {
    /// Creates (or updates) the stream of `settings` on `client`'s server:
    /// file storage, messages kept for `retention`.
    pub async fn connect(
        client: async_nats::Client,
        settings: JetStreamSettings,
        retention: Duration,
    ) -> Result<Self, LogError> {
        let max_payload = client.server_info().max_payload.saturating_sub(HEADER_ROOM);
        let context = jetstream::new(client);
        let config = Config {
            name: settings.stream.clone(),
            subjects: vec![format!("{}.>", settings.subject_prefix)],
            storage: StorageType::File,
            max_age: retention,
            duplicate_window: DUPLICATE_WINDOW.min(retention),
            ..Config::default()
        };
        context
            .create_or_update_stream(config)
            .await
            .map_err(|err| unavailable(format!("creating stream {}: {err}", settings.stream)))?;
        let stream = context
            .get_stream_no_info(&settings.stream)
            .await
            .map_err(unavailable)?;
        Ok(Self(Arc::new(Connected {
            context,
            stream,
            settings,
            max_payload,
        })))
    }

    /// Where its messages are kept.
    pub fn settings(&self) -> &JetStreamSettings {
        &self.0.settings
    }

    /// The most payload one message may carry.
    fn max_payload(&self) -> usize {
        self.0.max_payload
    }

    /// The subject of `account`'s conversation `conversation_id`.
    pub fn subject(&self, account: &AccountId, conversation_id: &str) -> String {
        subject::conversation_subject(&self.0.settings.subject_prefix, account, conversation_id)
    }

    /// The last message on `subject`, if any.
    async fn last(&self, subject: &str) -> Result<Option<Entry>, LogError> {
        match self.0.stream.get_last_raw_message_by_subject(subject).await {
            Ok(message) => Entry::parse(Some(&message.headers), message.sequence)
                .map(Some)
                .ok_or_else(|| {
                    LogError::Malformed(format!("message {} on {subject}", message.sequence))
                }),
            Err(err) if err.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// Publishes `message` on `subject` if the subject's last message is
    /// still at `expected` (0: none), and waits for the server's answer.
    async fn publish(
        &self,
        subject: &str,
        message: &Outgoing,
        expected: u64,
    ) -> Result<Published, LogError> {
        let publish = Publish::build()
            .payload(message.payload())
            .headers(message.headers())
            .message_id(message.message_id())
            .expected_last_subject_sequence(expected);
        let ack = self
            .0
            .context
            .send_publish(subject.to_owned(), publish)
            .await
            .map_err(unavailable)?;
        match ack.await {
            Ok(ack) => Ok(Published::At(ack.sequence)),
            Err(err) if err.kind() == PublishErrorKind::WrongLastSequence => Ok(Published::Refused),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// The messages on `subject` from sequence `from` on, in order.
    async fn messages(&self, subject: &str, from: u64) -> Result<Ordered, LogError> {
        let consumer = self
            .0
            .stream
            .create_consumer(OrderedConfig {
                filter_subject: subject.to_owned(),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: from,
                },
                ..OrderedConfig::default()
            })
            .await
            .map_err(unavailable)?;
        consumer.messages().await.map_err(unavailable)
    }
}
