//! The task that keeps a notified cache current: it listens on the cache's
//! channels, on a connection of its own, and tells the cache what it heard
//! and whether it is connected.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio::task::AbortHandle;

/// How long to wait before listening again after the connection failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// What a listener keeps current.
pub trait Notified: Send + Sync + 'static {
    /// Drops what a notice on `channel` with `payload` names (a payload it
    /// cannot read should drop everything).
    fn heard(&self, channel: &str, payload: &str);

    /// The listener connected (`true`) or lost its connection (`false`):
    /// everything cached is dropped, and the cache serves only while
    /// connected (see [`super::NotifiedMap::set_listening`]).
    fn set_listening(&self, listening: bool);
}

/// The running listener: stopped when dropped.
pub struct Listening(AbortHandle);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Listens on `channels` for `target`, on a connection of its own made
/// like `pool`'s, until `target` is dropped or the returned handle is;
/// a failed connection is made again after a short delay.
pub fn spawn_listener<T: Notified>(
    target: &Arc<T>,
    pool: &PgPool,
    channels: &'static [&'static str],
) -> Listening {
    let target = Arc::downgrade(target);
    // A connection of its own, so listening holds no place in the pool.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with((*pool.connect_options()).clone());
    let task = tokio::spawn(async move {
        loop {
            let err = listen(&pool, &target, channels).await;
            let Some(live) = target.upgrade() else {
                return;
            };
            live.set_listening(false);
            drop(live);
            if let Some(err) = err {
                tracing::warn!(%err, ?channels, "listening for changes failed; retrying");
            }
            tokio::time::sleep(RECONNECT_DELAY).await;
        }
    });
    Listening(task.abort_handle())
}

/// Relays notices until the connection fails (`Some` with the error, `None`
/// when it was simply lost) or the target is dropped.
async fn listen<T: Notified>(
    pool: &PgPool,
    target: &Weak<T>,
    channels: &[&str],
) -> Option<sqlx::Error> {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(err) => return Some(err),
    };
    if let Err(err) = listener.listen_all(channels.iter().copied()).await {
        return Some(err);
    }
    target.upgrade()?.set_listening(true);
    loop {
        let notification = match listener.try_recv().await {
            Ok(Some(notification)) => notification,
            // The connection was lost: start again (nothing is served
            // meanwhile).
            Ok(None) => return None,
            Err(err) => return Some(err),
        };
        target
            .upgrade()?
            .heard(notification.channel(), notification.payload());
    }
}
