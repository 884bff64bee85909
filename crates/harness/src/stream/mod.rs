//! Durable turn streams: every turn's UI message chunks are recorded, in
//! order and with an index, before anyone is shown them ([`record`]): in
//! Postgres by default, or in NATS JetStream ([`ChunkStore`]); any server process can replay a turn's chunks and follow it
//! live ([`follow`]), or wait for a detached turn's next run
//! ([`follow_held`]); a stop asked for in any process reaches the process
//! that runs the turn. A few writers per process record every turn's
//! chunks, many turns per statement. Postgres `LISTEN/NOTIFY` carries the news between
//! processes ([`StreamHub`]); a periodic check covers a missed notice.
//! Whatever the chunk store, each stream's row in Postgres keeps its
//! liveness, stop requests, and which stream is a conversation's latest.

mod abandoned;
mod error;
mod follower;
mod held;
mod hub;
pub mod jetstream;
mod recorder;
mod sink;
mod writer;

use std::time::Duration;

pub use abandoned::abandoned_turn_chunks;
pub use error::StreamError;
pub use follower::{follow, Followed};
pub use held::follow_held;
pub use hub::{Notice, StreamHub};
pub use jetstream::{JetStreamChunks, JetStreamSettings};
pub use recorder::{record, Opens, Recording};
pub use writer::WRITER_APPLICATION_NAME;

/// Where new turn streams keep their chunks (a stream is read from where
/// it was recorded, whatever this says).
#[derive(Debug, Clone, Default)]
pub enum ChunkStore {
    /// Rows of `turn_stream_batches`, written by the process's
    /// stream writers; purged once finished longer than the retention.
    #[default]
    Postgres,
    /// Messages on the conversation's subject of a JetStream stream,
    /// expired by the stream's `max_age` (the retention).
    JetStream(JetStreamChunks),
}

/// Knobs of turn streams; each one is a server setting.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// How often a follower and a recorder check the database without a
    /// notice (a notice missed while the listener reconnected); a recorder
    /// also renews its stream's life then.
    pub poll: Duration,
    /// How long a stream stays alive without its recorder renewing it: a
    /// stream of a server that died ends (with an error) this long after.
    pub alive: Duration,
    /// How long a finished turn's chunks are kept for replay; the turn's
    /// message stays in the conversation.
    pub retention: Duration,
    /// Most chunks of one turn recorded in one write.
    pub max_batch: usize,
    /// Writers recording this process's turns, each writing whatever has
    /// queued since its last write in one statement.
    pub writers: usize,
    /// Most turns' writes one statement combines.
    pub max_group: usize,
    /// How long a writer waits for more turns' writes after its first one,
    /// while they are busy: at least `commit_siblings` open streams asked
    /// for a write in the last 10 to 20 ms (zero: never).
    pub commit_delay: Duration,
    /// Open streams that asked the writers for a write in the last 10 to
    /// 20 ms from which they are busy: they wait `commit_delay`, and recorders `linger` before a
    /// stream's first batch too.
    pub commit_siblings: usize,
    /// How long a recorder waits after a batch's first chunk for more of
    /// its turn's chunks, in Postgres: for every batch but the one that
    /// opens a stream, and for that one too while the writers are busy
    /// (see `commit_siblings`; zero: never).
    pub linger: Duration,
    /// Whether turns are recorded at all; without it chunks go straight to
    /// the client, and there is nothing to resume or stop from elsewhere.
    pub record: bool,
    /// How long an HTTP resume waits for the next run of a detached turn
    /// that is between runs before answering 204 (a WebSocket resume waits
    /// as long as the turn is unsettled).
    pub resume_hold: Duration,
    /// Where new turn streams keep their chunks.
    pub chunks: ChunkStore,
}

impl StreamSettings {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        poll: Duration::from_secs(1),
        alive: Duration::from_secs(10),
        retention: Duration::from_secs(3600),
        max_batch: 256,
        writers: 2,
        max_group: 128,
        commit_delay: Duration::from_millis(3),
        commit_siblings: 8,
        linger: Duration::from_millis(1),
        record: true,
        resume_hold: Duration::from_secs(25),
        chunks: ChunkStore::Postgres,
    };
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The chunks that end a stream whose turn ended without its own end: the
/// server that ran it stopped.
pub(crate) fn orphan_end() -> Vec<String> {
    vec![
        serde_json::json!({"type": "error", "errorText": "the server running this turn stopped before the turn ended"}).to_string(),
        serde_json::json!({"type": "finish", "finishReason": "error"}).to_string(),
    ]
}
