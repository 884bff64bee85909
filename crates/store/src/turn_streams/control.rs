//! What follows and steers a running stream from outside its turn: stop
//! requests, the followers' count, keeping a stream alive, and purging
//! finished ones.

use std::time::Duration;

use sqlx::PgPool;
use toolserver_domain::AccountId;
use uuid::Uuid;

use super::channels::STOP_CHANNEL;
use crate::status_sql::{STREAM_ACTIVE, STREAM_FINISHED};
use crate::StoreError;

/// Asks the active stream of one of `account`'s conversations to stop;
/// returns its id, or `None` when no turn is streaming there.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn request_stop(
    pool: &PgPool,
    account: &AccountId,
    conversation_id: &str,
) -> Result<Option<Uuid>, StoreError> {
    let mut tx = pool.begin().await?;
    let stopped: Option<(Uuid,)> = sqlx::query_as(&format!(
        "UPDATE turn_streams SET stop_requested = true \
         WHERE account_id = $1 AND conversation_id = $2 AND status = {STREAM_ACTIVE} \
         RETURNING id"
    ))
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

/// Announces a stop of the turn whose stream will open as `stream` (a
/// turn that has not recorded a chunk yet): its recorder hears it.
pub async fn announce_stop(pool: &PgPool, stream: Uuid) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(STOP_CHANNEL)
        .bind(stream.to_string())
        .execute(pool)
        .await?;
    Ok(())
}

/// Counts a reader following `stream`: from now on its appends are
/// announced on [`CHUNKS_CHANNEL`]. Register before reading chunks, so an
/// append is either announced or already readable.
pub async fn add_follower(pool: &PgPool, stream: Uuid) -> Result<(), StoreError> {
    sqlx::query("UPDATE turn_streams SET followers = followers + 1 WHERE id = $1")
        .bind(stream)
        .execute(pool)
        .await?;
    Ok(())
}

/// Uncounts a reader of `stream` counted by [`add_follower`].
pub async fn remove_follower(pool: &PgPool, stream: Uuid) -> Result<(), StoreError> {
    sqlx::query("UPDATE turn_streams SET followers = greatest(followers - 1, 0) WHERE id = $1")
        .bind(stream)
        .execute(pool)
        .await?;
    Ok(())
}

/// Keeps `stream` alive for `alive` more; answers whether a stop was asked
/// for (`None`: the stream is no longer active, or its recorder was taken
/// for dead meanwhile).
pub async fn keep_alive(
    pool: &PgPool,
    stream: Uuid,
    alive: Duration,
) -> Result<Option<bool>, StoreError> {
    let found: Option<(bool,)> = sqlx::query_as(&format!(
        "UPDATE turn_streams SET alive_until = now() + make_interval(secs => $2) \
         WHERE id = $1 AND status = {STREAM_ACTIVE} AND alive_until > now() \
         RETURNING stop_requested"
    ))
    .bind(stream)
    .bind(alive.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    Ok(found.map(|(stop,)| stop))
}

/// Removes streams finished, or whose recorder died, longer than
/// `retention` ago (their turns' messages are in the conversation);
/// returns how many. Such a stream opened longer ago still, which is how
/// they are found.
pub async fn purge_finished(pool: &PgPool, retention: Duration) -> Result<u64, StoreError> {
    let done = sqlx::query(&format!(
        "DELETE FROM turn_streams WHERE created_at < now() - make_interval(secs => $1) \
           AND ((status = {STREAM_FINISHED} AND finished_at < now() - make_interval(secs => $1)) \
                OR (status = {STREAM_ACTIVE} AND alive_until < now() - make_interval(secs => $1)))"
    ))
    .bind(retention.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
