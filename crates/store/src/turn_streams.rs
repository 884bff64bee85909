//! The `turn_streams` and `turn_stream_chunks` tables: each turn's UI
//! message chunks in order, with an index, recorded before anyone is shown
//! them, so any process can replay a turn and follow it (see
//! `migrations/0008_turn_streams.sql`).
//!
//! Writers name the stream they opened; readers first find a stream through
//! their account ([`latest`]), so another account's stream is never reached.

use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::{FromRow, PgPool};
use toolserver_domain::AccountId;
use uuid::Uuid;

use crate::StoreError;

/// The channel on which appends and finishes are announced (payload: the
/// stream id).
pub const CHUNKS_CHANNEL: &str = "turn_stream_chunks";
/// The channel on which stop requests are announced (payload: the stream id).
pub const STOP_CHANNEL: &str = "turn_stream_stop";
/// The channel on which new streams are announced (payload: the stream id,
/// a space, and its [`conversation_key`]).
pub const OPENED_CHANNEL: &str = "turn_stream_opened";

/// What an opened notice says of the stream's conversation: the SHA-256, in
/// hex, of the account id, a newline, and the conversation id (fixed-size,
/// so any conversation id fits a notice, and the ids stay out of it).
pub fn conversation_key(account: &AccountId, conversation_id: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(account.as_str().as_bytes());
    digest.update(b"\n");
    digest.update(conversation_id.as_bytes());
    hex::encode(digest.finalize())
}

/// A stream as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct StreamState {
    /// The stream id.
    pub id: Uuid,
    /// Whether its last chunk is recorded.
    pub finished: bool,
    /// Chunks recorded so far.
    pub chunk_count: i32,
    /// Whether its recorder is alive (false for a stream whose server died,
    /// or that is finished).
    pub live: bool,
    /// Whether a stop was asked for.
    pub stop_requested: bool,
}

/// How an append went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Recorded; `stop_requested` says whether a stop was asked for since.
    Recorded {
        /// A stop was asked for.
        stop_requested: bool,
    },
    /// The stream is no longer active (sealed by a reader after its turn
    /// lost the conversation), or the count did not match: nothing recorded.
    Refused,
}

const STATE: &str = "SELECT s.id, s.status = 'finished' AS finished, s.chunk_count, \
         (s.status = 'active' AND s.alive_until > now()) AS live, s.stop_requested \
     FROM turn_streams s";

/// Opens a stream on `account`'s conversation `conversation_id`, alive for
/// `alive` unless renewed, finishing with `orphan_end` any older stream of
/// the conversation whose recorder died. Returns the new id.
#[tracing::instrument(skip(pool, orphan_end), fields(account.id = %account))]
pub async fn open(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
    alive: Duration,
    orphan_end: &[String],
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    let (orphans,): (i64,) = sqlx::query_as(
        "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting), \
         opened AS ( \
             INSERT INTO turn_streams (id, account_id, conversation_id, alive_until) \
             VALUES ($1, $2, $3, now() + make_interval(secs => $4)) RETURNING id) \
         SELECT (SELECT count(*) FROM turn_streams \
                 WHERE account_id = $2 AND conversation_id = $3 AND status = 'active' \
                   AND alive_until <= now()) \
         FROM opened, relaxed \
         WHERE relaxed.setting IS NOT NULL AND pg_notify($5, $1::text || ' ' || $6) IS NOT NULL",
    )
    .bind(id)
    .bind(account.as_str())
    .bind(conversation_id)
    .bind(alive.as_secs_f64())
    .bind(OPENED_CHANNEL)
    .bind(conversation_key(account, conversation_id))
    .fetch_one(pool)
    .await?;
    if orphans > 0 {
        finish_dead(pool, account, conversation_id, orphan_end).await?;
    }
    Ok(id)
}

/// Finishes with `end` every active stream of the conversation whose
/// recorder died.
async fn finish_dead(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
    end: &[String],
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let dead: Vec<(Uuid, i32)> = sqlx::query_as(
        "SELECT id, chunk_count FROM turn_streams \
         WHERE account_id = $1 AND conversation_id = $2 AND status = 'active' \
           AND alive_until <= now() FOR UPDATE",
    )
    .bind(account.as_str())
    .bind(conversation_id)
    .fetch_all(&mut *tx)
    .await?;
    for (stream, count) in dead {
        append_in(&mut *tx, stream, count, end, true, None).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Appends `chunks` (JSON texts) at index `from`, which must be the
/// stream's count, and keeps the stream alive for `alive`; with `finish`,
/// the stream ends with them.
pub async fn append(
    pool: &PgPool,
    stream: Uuid,
    from: i32,
    chunks: &[String],
    finish: bool,
    alive: Duration,
) -> Result<Appended, StoreError> {
    append_in(pool, stream, from, chunks, finish, Some(alive)).await
}

/// One statement: the count check, the stream update, the chunks and the
/// notice. Its commit does not wait for the WAL flush
/// (`synchronous_commit = off` for this transaction): chunks written by a
/// process that then dies are kept, and a Postgres crash can lose the last
/// fraction of a second of them, never leave them half-written.
async fn append_in(
    executor: impl sqlx::PgExecutor<'_>,
    stream: Uuid,
    from: i32,
    chunks: &[String],
    finish: bool,
    alive: Option<Duration>,
) -> Result<Appended, StoreError> {
    let added = i32::try_from(chunks.len()).map_err(|_| {
        StoreError::Other(sqlx::Error::Protocol(
            "too many chunks in one append".into(),
        ))
    })?;
    let stop: Option<(bool,)> = sqlx::query_as(
        "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting), \
         live AS ( \
             UPDATE turn_streams SET chunk_count = chunk_count + $3, \
                 status = CASE WHEN $4 THEN 'finished' ELSE status END, \
                 finished_at = CASE WHEN $4 THEN now() ELSE finished_at END, \
                 alive_until = CASE WHEN $5::float8 IS NULL THEN alive_until \
                                    ELSE now() + make_interval(secs => $5) END \
             WHERE id = $1 AND status = 'active' AND chunk_count = $2 \
               AND ($5::float8 IS NULL OR alive_until > now()) \
             RETURNING id, stop_requested), \
         added AS ( \
             INSERT INTO turn_stream_chunks (stream_id, idx, chunk) \
             SELECT live.id, $2 + (s.i - 1)::int, s.c::json \
             FROM live, unnest($6::text[]) WITH ORDINALITY AS s(c, i) \
             RETURNING 1) \
         SELECT live.stop_requested FROM live, relaxed \
         WHERE relaxed.setting IS NOT NULL AND pg_notify($7, $1::text) IS NOT NULL",
    )
    .bind(stream)
    .bind(from)
    .bind(added)
    .bind(finish)
    .bind(alive.map(|alive| alive.as_secs_f64()))
    .bind(chunks)
    .bind(CHUNKS_CHANNEL)
    .fetch_optional(executor)
    .await?;
    Ok(match stop {
        Some((stop_requested,)) => Appended::Recorded { stop_requested },
        None => Appended::Refused,
    })
}

/// The newest stream of one of `account`'s conversations, if any.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn latest(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
) -> Result<Option<StreamState>, StoreError> {
    let found = sqlx::query_as(&format!(
        "{STATE} WHERE s.account_id = $1 AND s.conversation_id = $2 \
         ORDER BY s.created_at DESC, s.id DESC LIMIT 1"
    ))
    .bind(account.as_str())
    .bind(conversation_id)
    .fetch_optional(pool)
    .await?;
    Ok(found)
}

/// The state of stream `stream` (found earlier through [`latest`]).
pub async fn state(pool: &PgPool, stream: Uuid) -> Result<StreamState, StoreError> {
    let found = sqlx::query_as(&format!("{STATE} WHERE s.id = $1"))
        .bind(stream)
        .fetch_optional(pool)
        .await?;
    found.ok_or(StoreError::NotFound)
}

/// Up to `limit` chunks of `stream` from index `from`, as JSON texts.
pub async fn chunks(
    pool: &PgPool,
    stream: Uuid,
    from: i32,
    limit: i64,
) -> Result<Vec<String>, StoreError> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT chunk::text FROM turn_stream_chunks \
         WHERE stream_id = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
    )
    .bind(stream)
    .bind(from)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(chunk,)| chunk).collect())
}

/// Finishes `stream` with `end` if it is active and its recorder died.
/// Returns whether it did.
pub async fn finish_orphan(
    pool: &PgPool,
    stream: Uuid,
    end: &[String],
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let orphan: Option<(i32,)> = sqlx::query_as(
        "SELECT chunk_count FROM turn_streams \
         WHERE id = $1 AND status = 'active' AND alive_until <= now() FOR UPDATE",
    )
    .bind(stream)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((count,)) = orphan else {
        return Ok(false);
    };
    let appended = append_in(&mut *tx, stream, count, end, true, None).await?;
    tx.commit().await?;
    Ok(appended != Appended::Refused)
}

/// Asks the active stream of one of `account`'s conversations to stop;
/// returns its id, or `None` when no turn is streaming there.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn request_stop(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
) -> Result<Option<Uuid>, StoreError> {
    let mut tx = pool.begin().await?;
    let stopped: Option<(Uuid,)> = sqlx::query_as(
        "UPDATE turn_streams SET stop_requested = true \
         WHERE account_id = $1 AND conversation_id = $2 AND status = 'active' \
         RETURNING id",
    )
    .bind(account.as_str())
    .bind(conversation_id)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((id,)) = stopped {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(STOP_CHANNEL)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(stopped.map(|(id,)| id))
}

/// Keeps `stream` alive for `alive` more; answers whether a stop was asked
/// for (`None`: the stream is no longer active, or its recorder was taken
/// for dead meanwhile).
pub async fn keep_alive(
    pool: &PgPool,
    stream: Uuid,
    alive: Duration,
) -> Result<Option<bool>, StoreError> {
    let found: Option<(bool,)> = sqlx::query_as(
        "UPDATE turn_streams SET alive_until = now() + make_interval(secs => $2) \
         WHERE id = $1 AND status = 'active' AND alive_until > now() \
         RETURNING stop_requested",
    )
    .bind(stream)
    .bind(alive.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    Ok(found.map(|(stop,)| stop))
}

/// Removes streams finished, or whose recorder died, longer than
/// `retention` ago (their turns' messages are in the conversation);
/// returns how many.
pub async fn purge_finished(pool: &PgPool, retention: Duration) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "DELETE FROM turn_streams WHERE \
           (status = 'finished' AND finished_at < now() - make_interval(secs => $1)) \
           OR (status = 'active' AND alive_until < now() - make_interval(secs => $1))",
    )
    .bind(retention.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
