//! The `turn_streams` and `turn_stream_batches` tables: each turn's UI
//! message chunks in order, with an index, recorded before anyone is shown
//! them, so any process can replay a turn and follow it (see
//! `migrations/0008_turn_streams.sql`); each append's chunks are one row of
//! `turn_stream_batches` (`migrations/0013_turn_stream_batches.sql`), and
//! every update of a stream's row is heap-only
//! (`migrations/0014_turn_streams_heap_only.sql`).
//!
//! Writers name the stream they opened and write many streams' chunks in
//! one statement ([`open_many`], [`append_many`]); readers first find a
//! stream through their account ([`latest`]), so another account's stream
//! is never reached, and count themselves as its followers
//! ([`add_follower`]) so appends are announced only while someone reads.
//!
//! A stream whose chunks are kept in NATS JetStream instead has its row
//! here all the same (liveness, stop requests, which stream is the
//! conversation's latest) with `log_start` set and no batch rows; its
//! recorder marks it finished ([`mark_finished`]) once the log holds its end.

use std::sync::LazyLock;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::{FromRow, PgPool};
use toolserver_domain::AccountId;
use uuid::Uuid;

use crate::status_sql::{STREAM_ACTIVE, STREAM_FINISHED, TURNS_UNFINISHED};
use crate::StoreError;
pub use channels::{CHUNKS_CHANNEL, OPENED_CHANNEL, STOP_CHANNEL};
pub use control::{
    add_follower, announce_stop, keep_alive, purge_finished, remove_follower, request_stop,
};

mod channels;
mod control;

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
    /// For a stream whose chunks are in JetStream, the sequence of its
    /// open message on the conversation's subject; `None`: chunks in
    /// Postgres.
    pub log_start: Option<i64>,
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

/// SQL: the [`StreamState`] of the streams `s` that `filter` (a `WHERE`
/// clause and what follows it) picks.
fn select_state(filter: &str) -> String {
    format!(
        "SELECT s.id, s.status = {STREAM_FINISHED} AS finished, s.chunk_count, \
             (s.status = {STREAM_ACTIVE} AND s.alive_until > now()) AS live, s.stop_requested, \
             s.log_start \
         FROM turn_streams s {filter}"
    )
}

/// A stream to open: recording starts once it is.
#[derive(Debug, Clone)]
pub struct Opening {
    /// The new stream's id.
    pub id: Uuid,
    /// The account whose conversation it is.
    pub account: AccountId,
    /// The conversation (whose lease the opener holds).
    pub conversation_id: String,
    /// Where its chunks start in JetStream (`None`: chunks in Postgres).
    pub log_start: Option<i64>,
    /// How long it stays alive unless its recorder renews it.
    pub alive: Duration,
}

/// Chunks to record on one stream.
#[derive(Debug, Clone)]
pub struct Append {
    /// The stream (opened by the same writer, or by this append).
    pub stream: Uuid,
    /// The index of the first chunk; must be the stream's count.
    pub from: i32,
    /// The chunks, as JSON texts.
    pub chunks: Vec<String>,
    /// Whether the stream ends with them.
    pub finish: bool,
    /// For a stream's first append: the stream to open with it (its id is
    /// `stream`; its chunks are in Postgres).
    pub opening: Option<Opening>,
}

impl Append {
    /// How many chunks it adds; an error when they, or the stream's count
    /// after them, do not fit an index.
    pub(crate) fn added(&self) -> Result<i32, StoreError> {
        i32::try_from(self.chunks.len())
            .ok()
            .filter(|added| self.from.checked_add(*added).is_some())
            .ok_or_else(too_many_chunks)
    }
}

/// What [`append_many`] answers for one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendAnswer {
    /// How it went.
    pub appended: Appended,
    /// For an append that opened its stream: whether the conversation has
    /// an older active stream whose recorder died (see [`finish_dead`]).
    pub older_dead: bool,
}

/// SQL: whether the conversation of the opening `i` (with `account_id`
/// and `conversation_id`) has an active stream whose recorder died.
fn older_dead_of_i() -> String {
    format!(
        "EXISTS (SELECT 1 FROM turn_streams d \
             WHERE d.account_id = i.account_id AND d.conversation_id = i.conversation_id \
               AND d.status = {STREAM_ACTIVE} AND d.alive_until <= now())"
    )
}

/// SQL, true: announces the stream the opening `i` opens on
/// [`OPENED_CHANNEL`] (bound to the parameter `channel` names), when its
/// conversation has an unsettled detached turn (only a resume held for such
/// a turn's next run waits for a stream to open).
fn announce_opening_of_i(channel: &str) -> String {
    format!(
        "CASE WHEN EXISTS (SELECT 1 FROM async_turns a \
             WHERE a.account_id = i.account_id AND a.conversation_id = i.conversation_id \
               AND a.status IN {TURNS_UNFINISHED}) \
         THEN pg_notify({channel}, i.id::text || ' ' || i.conversation_key) IS NOT NULL \
         ELSE true END"
    )
}

/// SQL of [`open_many`], built once.
static OPEN_MANY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS ( \
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $7::bigint[], \
                                  $5::float8[]) \
                 AS i(id, account_id, conversation_id, conversation_key, log_start, alive)), \
         opened AS ( \
             INSERT INTO turn_streams (id, account_id, conversation_id, alive_until, log_start) \
             SELECT id, account_id, conversation_id, now() + make_interval(secs => alive), log_start \
             FROM input RETURNING id) \
         SELECT i.id, {older_dead} FROM input i JOIN opened o ON o.id = i.id WHERE {announce}",
        older_dead = older_dead_of_i(),
        announce = announce_opening_of_i("$6"),
    )
});

/// Opens `streams` in one statement and announces on [`OPENED_CHANNEL`]
/// each whose conversation has an unsettled detached turn (only a resume
/// held for such a turn's next run waits for a stream to open). Answers,
/// for each, whether its conversation has an older active stream whose
/// recorder died (see [`finish_dead`]).
pub async fn open_many(
    executor: impl sqlx::PgExecutor<'_>,
    streams: &[Opening],
) -> Result<Vec<bool>, StoreError> {
    let ids: Vec<Uuid> = streams.iter().map(|s| s.id).collect();
    let accounts: Vec<&str> = streams.iter().map(|s| s.account.as_str()).collect();
    let conversations: Vec<&str> = streams.iter().map(|s| s.conversation_id.as_str()).collect();
    let keys: Vec<String> = streams
        .iter()
        .map(|s| conversation_key(&s.account, &s.conversation_id))
        .collect();
    let log_starts: Vec<Option<i64>> = streams.iter().map(|s| s.log_start).collect();
    let alive: Vec<f64> = streams.iter().map(|s| s.alive.as_secs_f64()).collect();
    let rows: Vec<(Uuid, bool)> = sqlx::query_as(&OPEN_MANY)
        .bind(&ids)
        .bind(&accounts)
        .bind(&conversations)
        .bind(&keys)
        .bind(&alive)
        .bind(OPENED_CHANNEL)
        .bind(&log_starts)
        .fetch_all(executor)
        .await?;
    Ok(ids
        .iter()
        .map(|id| rows.iter().any(|(opened, dead)| opened == id && *dead))
        .collect())
}

/// Finishes with `end` every active stream of `account`'s conversation
/// `conversation_id` whose recorder died; one whose chunks are kept
/// elsewhere (ended there by the caller) is only marked finished.
pub async fn finish_dead(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
    end: &[String],
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let dead: Vec<(Uuid, i32, bool)> = sqlx::query_as(&format!(
        "SELECT id, chunk_count, log_start IS NOT NULL FROM turn_streams \
         WHERE account_id = $1 AND conversation_id = $2 AND status = {STREAM_ACTIVE} \
           AND alive_until <= now() FOR UPDATE"
    ))
    .bind(account.as_str())
    .bind(conversation_id)
    .fetch_all(&mut *tx)
    .await?;
    for (stream, count, elsewhere) in dead {
        match elsewhere {
            true => mark_finished(&mut *tx, stream).await.map(drop)?,
            false => finish_with(&mut *tx, stream, count, end).await.map(drop)?,
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Marks `stream`, whose chunks are kept elsewhere, finished (its last
/// chunk is recorded there); answers whether it was still active.
pub async fn mark_finished(
    executor: impl sqlx::PgExecutor<'_>,
    stream: Uuid,
) -> Result<bool, StoreError> {
    let done = sqlx::query(&format!(
        "UPDATE turn_streams SET status = {STREAM_FINISHED}, finished_at = now() \
         WHERE id = $1 AND status = {STREAM_ACTIVE}"
    ))
    .bind(stream)
    .execute(executor)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// SQL of [`append_many`], built once.
static APPEND_MANY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS ( \
             SELECT * FROM unnest($1::uuid[], $2::int[], $3::int[], $4::bool[], $5::text[], \
                                  $6::text[], $7::text[], $8::float8[]) \
                 AS i(id, from_idx, added, finish, account_id, conversation_id, conversation_key, \
                      alive)), \
         opened AS ( \
             INSERT INTO turn_streams (id, account_id, conversation_id, alive_until, chunk_count, \
                                       status, finished_at) \
             SELECT i.id, i.account_id, i.conversation_id, now() + make_interval(secs => i.alive), \
                    i.added, CASE WHEN i.finish THEN {finished} ELSE {active} END, \
                    CASE WHEN i.finish THEN now() END \
             FROM input i WHERE i.account_id IS NOT NULL AND i.from_idx = 0 \
             ON CONFLICT (id) DO NOTHING \
             RETURNING id, 0 AS from_idx, stop_requested, followers), \
         live AS ( \
             UPDATE turn_streams s SET chunk_count = s.chunk_count + i.added, \
                 status = CASE WHEN i.finish THEN {finished} ELSE s.status END, \
                 finished_at = CASE WHEN i.finish THEN now() ELSE s.finished_at END \
             FROM input i \
             WHERE i.account_id IS NULL AND s.id = i.id AND s.status = {active} \
               AND s.chunk_count = i.from_idx AND s.alive_until > now() \
             RETURNING s.id, i.from_idx, s.stop_requested, s.followers), \
         recorded AS (SELECT * FROM opened UNION ALL SELECT * FROM live), \
         batches AS ( \
             SELECT c.stream_id, array_agg(c.chunk ORDER BY c.n) AS chunks \
             FROM unnest($9::uuid[], $10::text[]) WITH ORDINALITY AS c(stream_id, chunk, n) \
             GROUP BY c.stream_id), \
         added AS ( \
             INSERT INTO turn_stream_batches (stream_id, first_idx, chunks) \
             SELECT r.id, r.from_idx, b.chunks \
             FROM batches b JOIN recorded r ON r.id = b.stream_id \
             RETURNING 1) \
         SELECT r.id, r.stop_requested, i.account_id IS NOT NULL AND {older_dead} \
         FROM recorded r JOIN input i ON i.id = r.id \
         WHERE CASE WHEN r.followers > 0 THEN pg_notify($11, r.id::text) IS NOT NULL \
                    ELSE true END \
           AND (i.account_id IS NULL OR {announce})",
        finished = STREAM_FINISHED,
        active = STREAM_ACTIVE,
        older_dead = older_dead_of_i(),
        announce = announce_opening_of_i("$12"),
    )
});

/// Records `appends` (at most one per stream) in one statement, each
/// append's chunks as one batch row, opening the streams of those that
/// carry an [`Opening`] (announced like [`open_many`] does), and announces
/// each append on [`CHUNKS_CHANNEL`] if someone follows its stream.
/// Answers, in order, how each went: an append whose stream is no longer
/// active, was taken for dead, or whose count does not match (or whose
/// stream an earlier try already opened) is refused and records nothing.
/// An append leaves the stream's life as it was (its recorder renews it,
/// see [`keep_alive`]), so the update touches no indexed column.
pub async fn append_many(
    executor: impl sqlx::PgExecutor<'_>,
    appends: &[Append],
) -> Result<Vec<AppendAnswer>, StoreError> {
    let mut streams = Vec::with_capacity(appends.len());
    let mut froms = Vec::with_capacity(appends.len());
    let mut counts = Vec::with_capacity(appends.len());
    let mut finishes = Vec::with_capacity(appends.len());
    let mut accounts = Vec::with_capacity(appends.len());
    let mut conversations = Vec::with_capacity(appends.len());
    let mut keys = Vec::with_capacity(appends.len());
    let mut alive = Vec::with_capacity(appends.len());
    let (mut chunk_streams, mut chunks) = (Vec::new(), Vec::new());
    for append in appends {
        let added = append.added()?;
        streams.push(append.stream);
        froms.push(append.from);
        counts.push(added);
        finishes.push(append.finish);
        let opening = append.opening.as_ref();
        accounts.push(opening.map(|o| o.account.as_str()));
        conversations.push(opening.map(|o| o.conversation_id.as_str()));
        keys.push(opening.map(|o| conversation_key(&o.account, &o.conversation_id)));
        alive.push(opening.map(|o| o.alive.as_secs_f64()));
        for chunk in &append.chunks {
            chunk_streams.push(append.stream);
            chunks.push(chunk.as_str());
        }
    }
    let recorded: Vec<(Uuid, bool, bool)> = sqlx::query_as(&APPEND_MANY)
        .bind(&streams)
        .bind(&froms)
        .bind(&counts)
        .bind(&finishes)
        .bind(&accounts)
        .bind(&conversations)
        .bind(&keys)
        .bind(&alive)
        .bind(&chunk_streams)
        .bind(&chunks)
        .bind(CHUNKS_CHANNEL)
        .bind(OPENED_CHANNEL)
        .fetch_all(executor)
        .await?;
    Ok(streams
        .iter()
        .map(|stream| {
            recorded.iter().find(|(id, _, _)| id == stream).map_or(
                AppendAnswer {
                    appended: Appended::Refused,
                    older_dead: false,
                },
                |&(_, stop_requested, older_dead)| AppendAnswer {
                    appended: Appended::Recorded { stop_requested },
                    older_dead,
                },
            )
        })
        .collect())
}

/// The error for an append whose chunk count does not fit an index.
fn too_many_chunks() -> StoreError {
    StoreError::Other(sqlx::Error::Protocol(
        "too many chunks in one append".into(),
    ))
}

/// Ends `stream`, whose count is `from`, with the chunks `end` (for a
/// stream whose recorder died), announcing it if someone follows it.
async fn finish_with(
    executor: impl sqlx::PgExecutor<'_>,
    stream: Uuid,
    from: i32,
    end: &[String],
) -> Result<bool, StoreError> {
    let added = i32::try_from(end.len()).map_err(|_| too_many_chunks())?;
    let finished: Option<(Uuid,)> = sqlx::query_as(&format!(
        "WITH live AS ( \
             UPDATE turn_streams SET chunk_count = chunk_count + $3, \
                 status = {STREAM_FINISHED}, finished_at = now() \
             WHERE id = $1 AND status = {STREAM_ACTIVE} AND chunk_count = $2 \
             RETURNING id, followers), \
         added AS ( \
             INSERT INTO turn_stream_batches (stream_id, first_idx, chunks) \
             SELECT live.id, $2, $4::text[] FROM live WHERE cardinality($4::text[]) > 0 \
             RETURNING 1) \
         SELECT live.id FROM live \
         WHERE CASE WHEN live.followers > 0 THEN pg_notify($5, $1::text) IS NOT NULL \
                    ELSE true END"
    ))
    .bind(stream)
    .bind(from)
    .bind(added)
    .bind(end)
    .bind(CHUNKS_CHANNEL)
    .fetch_optional(executor)
    .await?;
    Ok(finished.is_some())
}

/// The newest stream of one of `account`'s conversations, if any.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn latest(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
) -> Result<Option<StreamState>, StoreError> {
    let found = sqlx::query_as(&select_state(
        "WHERE s.account_id = $1 AND s.conversation_id = $2 \
         ORDER BY s.created_at DESC, s.id DESC LIMIT 1",
    ))
    .bind(account.as_str())
    .bind(conversation_id)
    .fetch_optional(pool)
    .await?;
    Ok(found)
}

/// The state of stream `stream` (found earlier through [`latest`]).
pub async fn state(pool: &PgPool, stream: Uuid) -> Result<StreamState, StoreError> {
    let found = sqlx::query_as(&select_state("WHERE s.id = $1"))
        .bind(stream)
        .fetch_optional(pool)
        .await?;
    found.ok_or(StoreError::NotFound)
}

/// Up to `limit` chunks of `stream` from index `from`, as JSON texts: the
/// batch holding `from` and those after it (none for an index past the
/// last chunk, however far: `from` is any index a client may ask for).
pub async fn chunks(
    pool: &PgPool,
    stream: Uuid,
    from: i64,
    limit: i64,
) -> Result<Vec<String>, StoreError> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT c.chunk FROM turn_stream_batches b \
         CROSS JOIN LATERAL unnest(b.chunks) WITH ORDINALITY AS c(chunk, n) \
         WHERE b.stream_id = $1 \
           AND b.first_idx >= coalesce((SELECT max(h.first_idx) FROM turn_stream_batches h \
                                        WHERE h.stream_id = $1 AND h.first_idx <= $2), 0) \
           AND b.first_idx + c.n - 1 >= $2 \
         ORDER BY b.first_idx, c.n LIMIT $3",
    )
    .bind(stream)
    .bind(from)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(chunk,)| chunk).collect())
}

/// The newest stream of `account`'s conversation `conversation_id` opened
/// at or after `since` (`None`, for a lease taken before that was kept:
/// since the conversation was last stored, which a turn does as it
/// starts), its recorder
/// taken for dead now if it was still active: its appends and renewals are
/// refused from here on, and it can be finished as an orphan.
pub async fn abandon_newest(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
    since: Option<time::OffsetDateTime>,
) -> Result<Option<StreamState>, StoreError> {
    let newest: Option<(Uuid,)> = sqlx::query_as(
        "SELECT id FROM turn_streams \
         WHERE account_id = $1 AND conversation_id = $2 \
           AND created_at >= coalesce($3::timestamptz, \
                 (SELECT c.updated_at FROM conversations c \
                  WHERE c.account_id = $1 AND c.id = $2)) \
         ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(account.as_str())
    .bind(conversation_id)
    .bind(since)
    .fetch_optional(pool)
    .await?;
    let Some((stream,)) = newest else {
        return Ok(None);
    };
    sqlx::query(&format!(
        "UPDATE turn_streams SET alive_until = least(alive_until, now()) \
         WHERE id = $1 AND status = {STREAM_ACTIVE}"
    ))
    .bind(stream)
    .execute(pool)
    .await?;
    state(pool, stream).await.map(Some)
}

/// Finishes `stream` with `end` if it is active and its recorder died.
/// Returns whether it did.
pub async fn finish_orphan(
    pool: &PgPool,
    stream: Uuid,
    end: &[String],
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let orphan: Option<(i32,)> = sqlx::query_as(&format!(
        "SELECT chunk_count FROM turn_streams \
         WHERE id = $1 AND status = {STREAM_ACTIVE} AND alive_until <= now() FOR UPDATE"
    ))
    .bind(stream)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((count,)) = orphan else {
        return Ok(false);
    };
    let finished = finish_with(&mut *tx, stream, count, end).await?;
    tx.commit().await?;
    Ok(finished)
}
