//! The Postgres notification channels turn streams are announced on.

/// The channel on which appends and finishes of a followed stream are
/// announced (payload: the stream id).
pub const CHUNKS_CHANNEL: &str = "turn_stream_chunks";
/// The channel on which stop requests are announced (payload: the stream id).
pub const STOP_CHANNEL: &str = "turn_stream_stop";
/// The channel on which new streams are announced (payload: the stream id,
/// a space, and its [`conversation_key`](super::conversation_key)).
pub const OPENED_CHANNEL: &str = "turn_stream_opened";
