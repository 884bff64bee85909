//! The turn-stream channels, heard through the process's listener and
//! fanned out to the followers of this process (appends and opened streams)
//! and, apart, to its recorders (stop requests, which they alone wait for,
//! so a busy server's recorders are not woken by every other stream's
//! news).

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::broadcast;
use toolserver_store::notified::{Notifications, Notified};
use toolserver_store::turn_streams::{CHUNKS_CHANNEL, OPENED_CHANNEL, STOP_CHANNEL};
use uuid::Uuid;

use super::writer::{GroupTerms, StreamWriter};
use super::StreamSettings;

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

/// The channels the hub follows.
const CHANNELS: &[&str] = &[CHUNKS_CHANNEL, STOP_CHANNEL, OPENED_CHANNEL];

/// The process's view of turn-stream news, and its stream writers; stops
/// hearing and writing when dropped.
pub struct StreamHub {
    pool: PgPool,
    settings: StreamSettings,
    relayed: Arc<Relayed>,
    writer: StreamWriter,
}

impl StreamHub {
    /// Starts the writers on `pool`'s database, the news heard through
    /// `notifications` once their listener runs.
    pub fn start(
        pool: PgPool,
        settings: StreamSettings,
        notifications: &mut Notifications,
    ) -> Arc<Self> {
        let relayed = Arc::new(Relayed {
            notices: broadcast::channel(CAPACITY).0,
            stops: broadcast::channel(CAPACITY).0,
        });
        notifications.subscribe(&relayed, CHANNELS);
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
            relayed,
            writer,
        })
    }

    /// News for followers from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.relayed.notices.subscribe()
    }

    /// The ids of streams asked to stop, from now on.
    pub fn subscribe_stops(&self) -> broadcast::Receiver<Uuid> {
        self.relayed.stops.subscribe()
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

/// Where the listener sends what it hears (notices missed while it was
/// not connected are caught by the subscribers' periodic checks).
struct Relayed {
    notices: broadcast::Sender<Notice>,
    stops: broadcast::Sender<Uuid>,
}

impl Notified for Relayed {
    fn heard(&self, channel: &str, payload: &str) {
        match parse(channel, payload) {
            Some(News::Follow(notice)) => drop(self.notices.send(notice)),
            Some(News::Stop(stream)) => drop(self.stops.send(stream)),
            None => {}
        }
    }

    fn set_listening(&self, _listening: bool) {}
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
