//! Keeps the tool cache current: listens on `toolserver_tools` and drops
//! each changed tool; a lost connection stops the cache from serving and
//! drops everything until the listener is back.

use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use toolserver_domain::ToolId;
use toolserver_store::tools::CHANGED_CHANNEL;

use super::ToolCache;

/// How long to wait before listening again after the connection failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

impl ToolCache {
    /// Listens for changed tools, on a connection of its own, until `self`
    /// is dropped; the cache serves only while this is connected.
    pub fn spawn_listener(self: &Arc<Self>) {
        let cache = Arc::downgrade(self);
        // A connection of its own, so listening holds no place in the pool.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with((*self.pool.connect_options()).clone());
        let task = tokio::spawn(async move {
            loop {
                let err = listen(&pool, &cache).await;
                let Some(live) = cache.upgrade() else {
                    return;
                };
                live.set_listening(false);
                live.invalidate_all();
                drop(live);
                if let Some(err) = err {
                    tracing::warn!(%err, "listening for changed tools failed; retrying");
                }
                tokio::time::sleep(RECONNECT_DELAY).await;
            }
        });
        *self.listener.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
    }
}

/// Relays notices until the connection fails (`Some` with the error, `None`
/// when it was simply lost) or the cache is dropped.
async fn listen(pool: &PgPool, cache: &Weak<ToolCache>) -> Option<sqlx::Error> {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(err) => return Some(err),
    };
    if let Err(err) = listener.listen(CHANGED_CHANNEL).await {
        return Some(err);
    }
    let live = cache.upgrade()?;
    live.invalidate_all();
    live.set_listening(true);
    drop(live);
    loop {
        let notification = match listener.try_recv().await {
            Ok(Some(notification)) => notification,
            // The connection was lost: start again (nothing is served
            // meanwhile).
            Ok(None) => return None,
            Err(err) => return Some(err),
        };
        let live = cache.upgrade()?;
        match uuid::Uuid::parse_str(notification.payload()) {
            Ok(id) => live.invalidate(ToolId::from_uuid(id)),
            Err(_) => live.invalidate_all(),
        }
    }
}
