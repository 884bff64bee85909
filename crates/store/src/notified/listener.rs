//! The process's one listening connection: every part that follows Postgres
//! notifications subscribes to its channels before the listener starts;
//! the listener then listens on all of them at once, tells each part what
//! it heard on its own channels, and whether the connection is up.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio::task::AbortHandle;

/// How long to wait before listening again after the connection failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// The listening connection's name in `pg_stat_activity`.
pub const LISTENER_APPLICATION_NAME: &str = "toolserver-notifications";

/// What a listener keeps current.
pub trait Notified: Send + Sync + 'static {
    /// Drops what a notice on `channel` with `payload` names (a payload it
    /// cannot read should drop everything).
    fn heard(&self, channel: &str, payload: &str);

    /// The listener connected (`true`) or lost its connection (`false`):
    /// notices may have been missed meanwhile (for a cache: everything
    /// cached is dropped, and it serves only while connected, see
    /// [`super::NotifiedMap::set_listening`]).
    fn set_listening(&self, listening: bool);
}

/// One part and the channels it follows.
struct Subscription {
    target: Weak<dyn Notified>,
    channels: &'static [&'static str],
}

/// The subscriptions of a listener not started yet.
#[derive(Default)]
pub struct Notifications {
    subscriptions: Vec<Subscription>,
}

impl Notifications {
    /// No subscriptions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells `target` the notices on `channels` (and the connection's
    /// state) once the listener runs, until `target` is dropped.
    pub fn subscribe<T: Notified>(&mut self, target: &Arc<T>, channels: &'static [&'static str]) {
        let target: Weak<T> = Arc::downgrade(target);
        self.subscriptions.push(Subscription { target, channels });
    }

    /// Listens for the subscribers on one connection of its own, made like
    /// `pool`'s (it holds no place in the pool), until the returned handle
    /// is dropped (or, at a reconnection, no subscriber is left); a failed
    /// connection is made again after a short delay. Without subscribers it
    /// connects nowhere.
    pub fn start(self, pool: &PgPool) -> Listening {
        if self.subscriptions.is_empty() {
            return Listening(None);
        }
        let options = (*pool.connect_options())
            .clone()
            .application_name(LISTENER_APPLICATION_NAME);
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options);
        let task = tokio::spawn(run(pool, self.subscriptions));
        Listening(Some(task.abort_handle()))
    }
}

/// The running listener: stopped when dropped.
pub struct Listening(Option<AbortHandle>);

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Listens, connecting again after every failure, while a subscriber lives.
async fn run(pool: PgPool, mut subscriptions: Vec<Subscription>) {
    loop {
        let err = listen(&pool, &subscriptions).await;
        subscriptions.retain(|subscription| subscription.target.strong_count() > 0);
        if subscriptions.is_empty() {
            return;
        }
        for target in live(&subscriptions) {
            target.set_listening(false);
        }
        if let Some(err) = err {
            tracing::warn!(%err, "listening for notifications failed; retrying");
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Relays notices until the connection fails (`Some` with the error, `None`
/// when it was simply lost).
async fn listen(pool: &PgPool, subscriptions: &[Subscription]) -> Option<sqlx::Error> {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(err) => return Some(err),
    };
    let channels: BTreeSet<&str> = subscriptions
        .iter()
        .flat_map(|subscription| subscription.channels.iter().copied())
        .collect();
    if let Err(err) = listener.listen_all(channels).await {
        return Some(err);
    }
    for target in live(subscriptions) {
        target.set_listening(true);
    }
    loop {
        let notification = match listener.try_recv().await {
            Ok(Some(notification)) => notification,
            // The connection was lost: start again.
            Ok(None) => return None,
            Err(err) => return Some(err),
        };
        let channel = notification.channel();
        let following = subscriptions
            .iter()
            .filter(|subscription| subscription.channels.contains(&channel))
            .filter_map(|subscription| subscription.target.upgrade());
        for target in following {
            target.heard(channel, notification.payload());
        }
    }
}

/// The subscribers still alive.
fn live(subscriptions: &[Subscription]) -> impl Iterator<Item = Arc<dyn Notified>> + '_ {
    subscriptions
        .iter()
        .filter_map(|subscription| subscription.target.upgrade())
}
