//! The chunks of a turn whose server process died, to store the turn as
//! interrupted: its newest stream is taken for dead and ended as an orphan
//! (so anyone following it sees it end), then read whole, from wherever it
//! was recorded.

use std::sync::Arc;

use time::OffsetDateTime;
use tokio::sync::mpsc;
use toolserver_domain::AccountId;
use toolserver_store::turn_streams;

use super::jetstream::{self, LogError, Reading};
use super::{orphan_end, ChunkStore, StreamError, StreamHub};

/// Chunks read in one query.
const PAGE: i64 = 512;

/// Every chunk of the newest stream of `account`'s conversation
/// `conversation_id` opened at or after `since` (see
/// [`turn_streams::abandon_newest`]), its orphan end included; empty when
/// the turn recorded nothing.
pub async fn abandoned_turn_chunks(
    hub: &Arc<StreamHub>,
    account: &AccountId,
    conversation_id: &str,
    since: Option<OffsetDateTime>,
) -> Result<Vec<String>, StreamError> {
    let pool = hub.pool();
    let Some(state) = turn_streams::abandon_newest(pool, account, conversation_id, since).await?
    else {
        return Ok(Vec::new());
    };
    let Some(log_start) = state.log_start else {
        if !state.finished {
            turn_streams::finish_orphan(pool, state.id, &orphan_end()).await?;
        }
        let mut chunks = Vec::new();
        loop {
            let from = i64::try_from(chunks.len()).unwrap_or(i64::MAX);
            let page = turn_streams::chunks(pool, state.id, from, PAGE).await?;
            if page.is_empty() {
                return Ok(chunks);
            }
            chunks.extend(page);
        }
    };
    let ChunkStore::JetStream(log) = &hub.settings().chunks else {
        return Err(LogError::Unavailable(
            "the turn stream was recorded in NATS JetStream, which this server is not configured with".into(),
        )
        .into());
    };
    let subject = log.subject(account, conversation_id);
    jetstream::end_orphan(log, &subject, state.id).await?;
    turn_streams::mark_finished(pool, state.id).await?;
    let (sender, mut received) = mpsc::channel(PAGE as usize);
    let reading = Reading {
        subject,
        stream: state.id,
        log_start: u64::try_from(log_start).unwrap_or(1),
        start: 0,
    };
    let reader = tokio::spawn(jetstream::read(hub.clone(), log.clone(), reading, sender));
    let mut chunks = Vec::new();
    while let Some(chunk) = received.recv().await {
        chunks.push(chunk);
    }
    let _ = reader.await;
    Ok(chunks)
}
