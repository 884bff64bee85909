//! A chat turn's last write: what it added to its conversation stored, the
//! conversation released, and its stream's end recorded, in one statement. A reader who sees the stream
//! end therefore finds the turn stored and the conversation free for the
//! next turn, and a turn's end costs one round trip instead of three.

use std::sync::LazyLock;

use toolserver_domain::AccountId;
use uuid::Uuid;

use crate::conversation_messages::{messages_changed, tail_fits, tail_written, MessageTail};
use crate::conversations::{released, store_and_free};
use crate::status_sql::{STREAM_ACTIVE, STREAM_FINISHED};
use crate::turn_streams::{Append, Appended, CHUNKS_CHANNEL};
use crate::StoreError;

/// SQL of [`store_and_release`] with a stream end, built once.
static STORE_AND_END: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH owner AS ( \
             UPDATE conversations SET {changed}, {released} \
             WHERE account_id = $1 AND id = $2 AND active_turn = $3 AND {fits} \
             RETURNING head), \
         {written}, \
         ended AS ( \
             UPDATE turn_streams s SET chunk_count = s.chunk_count + $9, status = {finished}, \
                 finished_at = now() \
             WHERE s.id = $7 AND s.status = {active} AND s.chunk_count = $8 \
               AND s.alive_until > now() \
             RETURNING s.id, s.followers), \
         added AS ( \
             INSERT INTO turn_stream_batches (stream_id, first_idx, chunks) \
             SELECT id, $8, $10::text[] FROM ended RETURNING 1) \
         SELECT (SELECT head FROM owner), \
                EXISTS (SELECT 1 FROM ended \
                        WHERE CASE WHEN followers > 0 THEN pg_notify($11, id::text) IS NOT NULL \
                                   ELSE true END)",
        changed = messages_changed!(),
        released = released!(),
        fits = tail_fits!(),
        written = tail_written!(),
        finished = STREAM_FINISHED,
        active = STREAM_ACTIVE,
    )
});

/// What [`store_and_release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnEnded {
    /// The messages' new head, when they were stored (`None`: the turn no
    /// longer held the conversation, which is left as it was).
    pub stored: Option<i64>,
    /// How the stream's end went, when one was given.
    pub stream_end: Option<Appended>,
}

/// Stores `tail` of `account`'s conversation `id` and releases it, if
/// `turn_id` still holds it; with `stream_end` (the last append of a stream
/// already open in Postgres, `finish` set), ends that stream in the same
/// statement, fenced as any append is (the stream still active and alive,
/// its count at `from`) and announced if someone follows it.
#[tracing::instrument(skip(conn, tail, stream_end), fields(account.id = %account))]
pub async fn store_and_release(
    conn: &mut sqlx::PgConnection,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
    tail: &MessageTail,
    stream_end: Option<&Append>,
) -> Result<TurnEnded, StoreError> {
    let Some(end) = stream_end else {
        let stored = store_and_free(&mut *conn, account, id, turn_id, tail).await?;
        return Ok(TurnEnded {
            stored,
            stream_end: None,
        });
    };
    if end.opening.is_some() || !end.finish || end.chunks.is_empty() {
        return Err(StoreError::Other(sqlx::Error::Protocol(
            "a turn's stream end must finish an open stream with at least one chunk".into(),
        )));
    }
    let added = end.added()?;
    let (from, total) = tail.bounds()?;
    let (stored, ended): (Option<i64>, bool) = sqlx::query_as(&STORE_AND_END)
        .bind(account.as_str())
        .bind(id)
        .bind(turn_id)
        .bind(from)
        .bind(total)
        .bind(&tail.messages)
        .bind(end.stream)
        .bind(end.from)
        .bind(added)
        .bind(&end.chunks)
        .bind(CHUNKS_CHANNEL)
        .fetch_one(&mut *conn)
        .await?;
    Ok(TurnEnded {
        stored,
        stream_end: Some(match ended {
            true => Appended::Recorded {
                stop_requested: false,
            },
            false => Appended::Refused,
        }),
    })
}
