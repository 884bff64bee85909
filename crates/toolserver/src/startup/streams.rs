//! Turn streams: the NATS connection, where chunks are kept, and how
//! streams are recorded and resumed.

use std::time::Duration;

use anyhow::Context;
use toolserver_harness::stream::{ChunkStore, JetStreamChunks, JetStreamSettings, StreamSettings};

use crate::config::{StreamsConfig, TurnChunks};

/// Connects to NATS when `TOOLSERVER_NATS_URL` is set.
pub(super) async fn connect_nats(
    config: &StreamsConfig,
) -> anyhow::Result<Option<async_nats::Client>> {
    let Some(url) = &config.nats_url else {
        return Ok(None);
    };
    let client = async_nats::connect(url.as_str())
        .await
        .with_context(|| format!("connecting to NATS at {url}"))?;
    Ok(Some(client))
}

/// Where turn streams keep their chunks (`TOOLSERVER_TURN_CHUNKS`): in
/// JetStream on the NATS server (the default when there is one), whose
/// stream is created or updated here, else in Postgres.
pub(super) async fn chunk_store(
    config: &StreamsConfig,
    nats: Option<&async_nats::Client>,
) -> anyhow::Result<ChunkStore> {
    let kind = config.turn_chunks.unwrap_or(match nats {
        Some(_) => TurnChunks::Nats,
        None => TurnChunks::Postgres,
    });
    let client = match (kind, nats) {
        (TurnChunks::Postgres, _) => return Ok(ChunkStore::Postgres),
        (TurnChunks::Nats, None) => {
            anyhow::bail!("TOOLSERVER_TURN_CHUNKS=nats needs TOOLSERVER_NATS_URL")
        }
        (TurnChunks::Nats, Some(client)) => client.clone(),
    };
    let settings = JetStreamSettings {
        stream: config.nats_stream.clone(),
        subject_prefix: config.nats_chunk_prefix.clone(),
    };
    let retention = Duration::from_secs(config.stream_retention_secs);
    let chunks = JetStreamChunks::connect(client, settings, retention)
        .await
        .context(
            "setting up the JetStream stream of turn chunks (TOOLSERVER_TURN_CHUNKS=nats, the \
             default with TOOLSERVER_NATS_URL, needs JetStream on the NATS server; \
             TOOLSERVER_TURN_CHUNKS=postgres keeps them in Postgres)",
        )?;
    tracing::info!(
        stream = %config.nats_stream,
        subject_prefix = %config.nats_chunk_prefix,
        "turn chunks kept in NATS JetStream"
    );
    Ok(ChunkStore::JetStream(chunks))
}

/// How turn streams are recorded, kept alive and resumed.
pub(super) fn stream_settings(config: &StreamsConfig, chunks: ChunkStore) -> StreamSettings {
    StreamSettings {
        poll: Duration::from_millis(config.stream_poll_ms),
        alive: Duration::from_millis(config.stream_alive_ms),
        retention: Duration::from_secs(config.stream_retention_secs),
        max_batch: config.stream_max_batch,
        writers: config.stream_writers,
        max_group: config.stream_max_group,
        commit_delay: Duration::from_micros(config.stream_commit_delay_us),
        commit_siblings: config.stream_commit_siblings,
        linger: Duration::from_micros(config.stream_linger_us),
        record: config.stream_recording,
        resume_hold: Duration::from_millis(config.stream_resume_hold_ms),
        chunks,
    }
}
