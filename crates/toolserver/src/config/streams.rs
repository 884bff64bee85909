//! Turn streams: where their chunks are kept and how they are recorded,
//! resumed and kept alive; turn requests over NATS; chat WebSockets.

use clap::{Args, ValueEnum};
use toolserver_api::ApiSettings;
use toolserver_harness::stream::{JetStreamSettings, StreamSettings};
use toolserver_harness::HarnessSettings;

use super::parse::within;
use super::units::{micros, millis, secs};

/// The longest a stream writer waits or a recorder lingers, in microseconds.
const MAX_BATCH_WAIT_US: u64 = 100_000;

/// Where turn streams keep their chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TurnChunks {
    /// Rows in Postgres, written in batches.
    Postgres,
    /// Messages in NATS JetStream: a stream per deployment, a subject per
    /// conversation.
    Nats,
}

/// Turn streams, NATS and chat WebSockets.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Turn streams and NATS")]
pub struct StreamsConfig {
    /// NATS server to take turn requests from. Unset: no NATS.
    #[arg(long, env = "TOOLSERVER_NATS_URL")]
    pub nats_url: Option<String>,
    /// Subject of turn requests over NATS (served by the queue group
    /// `<subject>.servers`).
    #[arg(
        long,
        env = "TOOLSERVER_NATS_SUBJECT",
        default_value = "toolserver.turns"
    )]
    pub nats_subject: String,
    /// Where turn streams keep their chunks: `postgres` (rows, written in
    /// batches) or `nats` (NATS JetStream on the server of
    /// `TOOLSERVER_NATS_URL`, which must have JetStream on). Unset: `nats`
    /// when `TOOLSERVER_NATS_URL` is set, else `postgres`.
    #[arg(long, env = "TOOLSERVER_TURN_CHUNKS", value_enum)]
    pub turn_chunks: Option<TurnChunks>,
    /// The JetStream stream of turn chunks, one per deployment; created or
    /// updated at start with file storage and `max_age` =
    /// `TOOLSERVER_STREAM_RETENTION_SECS`.
    #[arg(
        long,
        env = "TOOLSERVER_NATS_STREAM",
        default_value = JetStreamSettings::DEFAULT_STREAM
    )]
    pub nats_stream: String,
    /// Prefix of the conversations' subjects in the JetStream stream
    /// (`<prefix>.<account>.<conversation>`, ids as URL-safe base64), which
    /// takes `<prefix>.>`.
    #[arg(
        long,
        env = "TOOLSERVER_NATS_CHUNK_PREFIX",
        default_value = JetStreamSettings::DEFAULT_SUBJECT_PREFIX
    )]
    pub nats_chunk_prefix: String,
    /// Seconds between keep-alive comments on an idle turn stream, and
    /// pings on a quiet chat WebSocket.
    #[arg(
        long,
        env = "TOOLSERVER_SSE_KEEPALIVE_SECS",
        default_value_t = secs(HarnessSettings::DEFAULT_KEEP_ALIVE),
        value_parser = within::<u64>(1..)
    )]
    pub sse_keepalive_secs: u64,
    /// Milliseconds between a turn stream's checks of the database without
    /// a notice: a resume's look for new chunks, a running turn's look for
    /// a stop and renewal of its stream.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_POLL_MS",
        default_value_t = millis(StreamSettings::DEFAULT.poll),
        value_parser = within::<u64>(10..)
    )]
    pub stream_poll_ms: u64,
    /// Milliseconds a turn stream stays alive unless its server renews it:
    /// the stream of a server that died is ended, with an error, by its
    /// next reader this long after; at least twice
    /// `TOOLSERVER_STREAM_POLL_MS`.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_ALIVE_MS",
        default_value_t = millis(StreamSettings::DEFAULT.alive)
    )]
    pub stream_alive_ms: u64,
    /// Seconds a finished turn's chunks are kept for replay; the turn's
    /// message stays in the conversation. In JetStream, how long each
    /// message is kept, so keep it above the longest turn.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_RETENTION_SECS",
        default_value_t = secs(StreamSettings::DEFAULT.retention),
        value_parser = within::<u64>(1..)
    )]
    pub stream_retention_secs: u64,
    /// Most chunks of one turn recorded in one database write.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_MAX_BATCH",
        default_value_t = StreamSettings::DEFAULT.max_batch,
        value_parser = within::<usize>(1..=10_000)
    )]
    pub stream_max_batch: usize,
    /// Writers recording this process's turn streams, each on a database
    /// connection of its own (besides the pool), each writing whatever has
    /// queued since its last write in one statement, so a busy server
    /// writes many turns' chunks per round trip.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_WRITERS",
        default_value_t = StreamSettings::DEFAULT.writers,
        value_parser = within::<usize>(1..=64)
    )]
    pub stream_writers: usize,
    /// Most turns' writes one statement combines.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_MAX_GROUP",
        default_value_t = StreamSettings::DEFAULT.max_group,
        value_parser = within::<usize>(1..=10_000)
    )]
    pub stream_max_group: usize,
    /// Microseconds a stream writer waits for more turns' writes after its
    /// first one, while the writers are busy (see
    /// `TOOLSERVER_STREAM_COMMIT_SIBLINGS`; 0: never); trades up to this much latency per
    /// batch for fewer statements under load (Postgres store): a
    /// statement's fixed cost is several times what each turn's rows add.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_COMMIT_DELAY_US",
        default_value_t = micros(StreamSettings::DEFAULT.commit_delay),
        value_parser = within::<u64>(..=MAX_BATCH_WAIT_US)
    )]
    pub stream_commit_delay_us: u64,
    /// Open turn streams that asked this process's stream writers for a
    /// write in the last 10 to 20 ms, from which the writers are busy: they wait
    /// `TOOLSERVER_STREAM_COMMIT_DELAY_US`, and recorders linger
    /// `TOOLSERVER_STREAM_LINGER_US` before a stream's first batch too. Open
    /// turns that are quiet (waiting for their model or a tool) ask
    /// nothing, so they make no other turn wait.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_COMMIT_SIBLINGS",
        default_value_t = StreamSettings::DEFAULT.commit_siblings
    )]
    pub stream_commit_siblings: usize,
    /// Microseconds a turn's recorder waits after a batch's first chunk for
    /// more of the turn's chunks before recording them: for every batch but
    /// a stream's first, and for that one too while the writers are busy
    /// (see `TOOLSERVER_STREAM_COMMIT_SIBLINGS`; 0: never); trades
    /// up to this much latency per batch for fewer, larger appends
    /// (Postgres store).
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_LINGER_US",
        default_value_t = micros(StreamSettings::DEFAULT.linger),
        value_parser = within::<u64>(..=MAX_BATCH_WAIT_US)
    )]
    pub stream_linger_us: u64,
    /// Record turn streams; `false` sends chunks straight to the client: no
    /// resume, no stop from another connection (a disconnect then follows
    /// `onDisconnect` as before).
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_RECORDING",
        default_value_t = StreamSettings::DEFAULT.record,
        action = clap::ArgAction::Set
    )]
    pub stream_recording: bool,
    /// Milliseconds an HTTP resume of a detached turn that is between runs
    /// waits for its next run before answering 204; below
    /// `TOOLSERVER_REQUEST_TIMEOUT_SECS` by at least a second.
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_RESUME_HOLD_MS",
        default_value_t = millis(StreamSettings::DEFAULT.resume_hold)
    )]
    pub stream_resume_hold_ms: u64,
    /// Most requests one chat WebSocket answers at once; more get an
    /// `error` frame.
    #[arg(
        long,
        env = "TOOLSERVER_WS_MAX_REQUESTS",
        default_value_t = ApiSettings::DEFAULT.max_socket_requests,
        value_parser = within::<usize>(1..)
    )]
    pub ws_max_requests: usize,
}
