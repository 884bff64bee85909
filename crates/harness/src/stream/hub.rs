//! One Postgres listener per process for the turn-stream channels, fanned
//! out to the followers of this process (appends and opened streams) and,
//! apart, to its recorders (stop requests, which they alone wait for, so a
//! busy server's recorders are not woken by every other stream's news).

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::broadcast;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolserver_store::turn_streams::{CHUNKS_CHANNEL, OPENED_CHANNEL, STOP_CHANNEL};
use uuid::Uuid;

use super::writer::{GroupTerms, StreamWriter};
use super::StreamSettings;

/// How long the listener waits before connecting again after a failure.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);
/// Notices buffered per subscriber; one that falls further behind checks
/// the database instead.
const CAPACITY: usize = 1024;

/// News about one stream, for its followers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Chunks were recorded, or the stream finished.
    Chunks(Uuid),
    /// A stream was opened on the conversation whose
    /// [`toolserver_store::turn_streams::conversation_key`] is the second field.
    Opened(Uuid, Arc<str>),
}

/// The process's view of turn-stream news, and its stream writers; stops
/// listening and writing when dropped.
pub struct StreamHub {
    pool: PgPool,
    settings: StreamSettings,
    notices: broadcast::Sender<Notice>,
    stops: broadcast::Sender<Uuid>,
    writer: StreamWriter,
    _listening: DropGuard,
}

impl StreamHub {
    /// Starts listening on `pool`'s database (in the background: the
    /// listener connects again after any failure).
    pub fn start(pool: PgPool, settings: StreamSettings) -> Arc<Self> {
        let (notices, _) = broadcast::channel(CAPACITY);
        let (stops, _) = broadcast::channel(CAPACITY);
        let stop = CancellationToken::new();
        let relayed = Relayed {
            notices: notices.clone(),
            stops: stops.clone(),
        };
        tokio::spawn(listen(pool.clone(), relayed, stop.clone()));
        let writer = StreamWriter::start(
            &pool,
            GroupTerms {
                writers: settings.writers,
                max_group: settings.max_group,
                commit_delay: settings.commit_delay,
                commit_siblings: settings.commit_siblings,
            },
        );
        Arc::new(Self {
            pool,
            settings,
            notices,
            stops,
            writer,
            _listening: stop.drop_guard(),
        })
    }

    /// News for followers from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// The ids of streams asked to stop, from now on.
    pub fn subscribe_stops(&self) -> broadcast::Receiver<Uuid> {
        self.stops.subscribe()
    }

    /// The database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The writers recording this process's turns.
    pub(crate) fn writer(&self) -> &StreamWriter {
        &self.writer
    }

    /// The stream settings.
    pub fn settings(&self) -> &StreamSettings {
        &self.settings
    }
}

/// Where the listener sends what it hears.
struct Relayed {
    notices: broadcast::Sender<Notice>,
    stops: broadcast::Sender<Uuid>,
}

async fn listen(pool: PgPool, relayed: Relayed, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            failed = relay(&pool, &relayed) => {
                tracing::warn!(error = %failed, "turn-stream listener lost its connection; connecting again");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RECONNECT_DELAY) => {}
        }
    }
}

/// Relays notifications until the connection fails for good (a dropped
/// connection is made again by `recv`; notices missed meanwhile are caught
/// by the subscribers' periodic checks).
async fn relay(pool: &PgPool, relayed: &Relayed) -> sqlx::Error {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(err) => return err,
    };
    if let Err(err) = listener
        .listen_all([CHUNKS_CHANNEL, STOP_CHANNEL, OPENED_CHANNEL])
        .await
    {
        return err;
    }
    loop {
        let notification = match listener.recv().await {
            Ok(notification) => notification,
            Err(err) => return err,
        };
        match parse(notification.channel(), notification.payload()) {
            Some(News::Follow(notice)) => drop(relayed.notices.send(notice)),
            Some(News::Stop(stream)) => drop(relayed.stops.send(stream)),
            None => {}
        }
    }
}

/// What one notification says.
enum News {
    /// For followers.
    Follow(Notice),
    /// A stop asked for the stream.
    Stop(Uuid),
}

/// The news a notification carries; `None` for one this process did not
/// expect.
fn parse(channel: &str, payload: &str) -> Option<News> {
    let (id, key) = match payload.split_once(' ') {
        Some((id, key)) => (id, Some(key)),
        None => (payload, None),
    };
    let id = Uuid::parse_str(id).ok()?;
    match (channel, key) {
        (CHUNKS_CHANNEL, None) => Some(News::Follow(Notice::Chunks(id))),
        (STOP_CHANNEL, None) => Some(News::Stop(id)),
        (OPENED_CHANNEL, Some(key)) => Some(News::Follow(Notice::Opened(id, key.into()))),
        _ => None,
    }
}
