//! One Postgres listener per process for the turn-stream channels, fanned
//! out to the recorders and followers of this process.

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

/// News about one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Chunks were recorded, or the stream finished.
    Chunks(Uuid),
    /// A stop was asked for.
    Stop(Uuid),
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
    writer: StreamWriter,
    _listening: DropGuard,
}

impl StreamHub {
    /// Starts listening on `pool`'s database (in the background: the
    /// listener connects again after any failure).
    pub fn start(pool: PgPool, settings: StreamSettings) -> Arc<Self> {
        let (notices, _) = broadcast::channel(CAPACITY);
        let stop = CancellationToken::new();
        tokio::spawn(listen(pool.clone(), notices.clone(), stop.clone()));
        let writer = StreamWriter::start(
            pool.clone(),
            GroupTerms {
                writers: settings.writers,
                max_group: settings.max_group,
                commit_delay: settings.commit_delay,
                commit_siblings: settings.commit_siblings,
                alive: settings.alive,
            },
        );
        Arc::new(Self {
            pool,
            settings,
            notices,
            writer,
            _listening: stop.drop_guard(),
        })
    }

    /// News from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
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

async fn listen(pool: PgPool, notices: broadcast::Sender<Notice>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            failed = relay(&pool, &notices) => {
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
async fn relay(pool: &PgPool, notices: &broadcast::Sender<Notice>) -> sqlx::Error {
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
        if let Some(notice) = parse(notification.channel(), notification.payload()) {
            let _ = notices.send(notice);
        }
    }
}

/// The notice a notification carries; `None` for one this process did not
/// expect.
fn parse(channel: &str, payload: &str) -> Option<Notice> {
    let (id, key) = match payload.split_once(' ') {
        Some((id, key)) => (id, Some(key)),
        None => (payload, None),
    };
    let id = Uuid::parse_str(id).ok()?;
    match (channel, key) {
        (CHUNKS_CHANNEL, None) => Some(Notice::Chunks(id)),
        (STOP_CHANNEL, None) => Some(Notice::Stop(id)),
        (OPENED_CHANNEL, Some(key)) => Some(Notice::Opened(id, key.into())),
        _ => None,
    }
}
