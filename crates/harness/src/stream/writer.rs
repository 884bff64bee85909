//! Group commit for turn streams: every recorder of this process hands its
//! opens and appends to a few writers, and each writer records whatever
//! has queued up since its last write in one statement. An idle server
//! writes each batch at once; a busy one writes many turns' chunks per
//! round trip, so recording costs the database far fewer statements than
//! turns have bursts. While enough turns write at once (open streams that
//! asked lately; a turn waiting for its model asks nothing), a writer waits a
//! moment after its first request for others to join it (a commit delay),
//! so paced streams, whose chunks arrive one at a time, share statements
//! too; a server whose open turns are quiet makes no one wait.
//!
//! Each writer keeps a connection of its own, outside the pool (so no
//! pings before and after each statement), on which Postgres plans
//! each statement once (`plan_cache_mode = force_generic_plan`): a group's
//! statement is large and its arrays vary in length, so Postgres would
//! otherwise keep planning it afresh, at a cost close to running it. Their
//! commits are asynchronous (`synchronous_commit = off`): a write returns
//! once it is in the WAL's buffers, which Postgres flushes within a
//! fraction of a second, so a crash of Postgres itself (not of a server)
//! can lose the last moment of a live stream; its turn then stops at its
//! next write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool};
use tokio::sync::{mpsc, oneshot, Mutex};
use toolserver_store::turn_streams::{self, Append, AppendAnswer, Opening};
use toolserver_store::{StoreError, Unpooled};

/// How long a writer's connection, and so its statements' plans, is kept:
/// a plan is made from the tables' statistics of its time (one made while
/// the tables were nearly empty would scan them), and they grow.
const PLAN_LIFETIME: Duration = Duration::from_secs(300);

/// How the writers' connections name themselves to Postgres (as seen in
/// `pg_stat_activity`).
pub const WRITER_APPLICATION_NAME: &str = "toolserver-stream-writer";

/// Where the answer to one request goes.
type Answer<T> = oneshot::Sender<Result<T, StoreError>>;

/// One recorder's request, with where its answer goes.
enum Request {
    Open(Opening, Answer<bool>),
    Append(Append, Answer<AppendAnswer>),
}

/// How the writers group requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupTerms {
    /// Writers, each with one statement in flight.
    pub(crate) writers: usize,
    /// Most requests one statement combines.
    pub(crate) max_group: usize,
    /// How long a writer waits for more requests after its first one...
    pub(crate) commit_delay: Duration,
    /// ...when at least this many open streams asked lately.
    pub(crate) commit_siblings: usize,
}

/// The queue the writers take from; they stop once it is dropped.
pub(crate) struct StreamWriter {
    queue: mpsc::Sender<Request>,
    load: Arc<Load>,
}

/// How long a stream's request counts as recent: a turn whose model
/// streams (a chunk every 10 to 50 ms, as hosted models do) asks about once
/// in it while it writes, and not at all while it waits.
const RECENT: Duration = Duration::from_millis(10);

/// How many open streams asked the writers for a write lately, and from how
/// many on the writers count as busy. A stream that is open but quiet (its
/// turn waiting for its model or a tool) asks nothing and is not counted,
/// and neither is a finished one, so one client's turns in a row do not
/// make each other wait, nor do one account's many quiet turns another's.
struct Load {
    started: Instant,
    /// How long a request counts as recent ([`RECENT`]).
    window: Duration,
    recent: std::sync::Mutex<RecentStreams>,
    siblings: usize,
}

/// Open streams that asked, counted per window of [`RECENT`]: in the
/// current one and in the one before it.
#[derive(Default)]
struct RecentStreams {
    window: u64,
    current: usize,
    previous: usize,
}

impl RecentStreams {
    /// Moves the counts on to `window`.
    fn roll_to(&mut self, window: u64) {
        if window == self.window {
            return;
        }
        self.previous = if window == self.window + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.window = window;
    }
}

impl Load {
    fn new(siblings: usize, window: Duration) -> Self {
        Self {
            started: Instant::now(),
            window,
            recent: std::sync::Mutex::default(),
            siblings,
        }
    }

    /// The counts, moved on to now.
    fn recent(&self) -> std::sync::MutexGuard<'_, RecentStreams> {
        let elapsed = self.started.elapsed().as_nanos() / self.window.as_nanos().max(1);
        let window = u64::try_from(elapsed).unwrap_or(u64::MAX);
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.roll_to(window);
        recent
    }

    /// Whether enough streams asked lately (in the last one to two
    /// [`RECENT`] windows) for the writers to wait for more requests after
    /// their first one.
    fn busy(&self) -> bool {
        let recent = self.recent();
        recent.current + recent.previous >= self.siblings
    }
}

/// One open stream's part in the writers' load: counted from its first
/// request in a window until the window passes or the stream is dropped.
pub(crate) struct StreamLoad {
    load: Arc<Load>,
    /// The window of its latest request.
    asked_in: Option<u64>,
}

impl StreamLoad {
    /// Counts the stream's request.
    pub(crate) fn asked(&mut self) {
        let mut recent = self.load.recent();
        if self.asked_in != Some(recent.window) {
            recent.current += 1;
            self.asked_in = Some(recent.window);
        }
    }
}

impl Drop for StreamLoad {
    fn drop(&mut self) {
        let Some(asked_in) = self.asked_in else {
            return;
        };
        let mut recent = self.load.recent();
        if asked_in == recent.window {
            recent.current = recent.current.saturating_sub(1);
        } else if asked_in + 1 == recent.window {
            recent.previous = recent.previous.saturating_sub(1);
        }
    }
}

impl StreamWriter {
    /// Starts the writers, each on a connection of its own to `pool`'s
    /// database.
    pub(crate) fn start(pool: &PgPool, terms: GroupTerms) -> Self {
        let max = terms.max_group.max(1);
        let writers = terms.writers.max(1);
        let (queue, requests) = mpsc::channel(max * writers * 4);
        let requests = Arc::new(Mutex::new(requests));
        let load = Arc::new(Load::new(terms.commit_siblings, RECENT));
        for _ in 0..writers {
            let group = Group {
                connection: WriterConnection::new(pool),
                max,
                delay: terms.commit_delay,
                load: load.clone(),
            };
            tokio::spawn(group.run(requests.clone()));
        }
        Self { queue, load }
    }

    /// A stream's part in the writers' load, to count its requests with.
    pub(crate) fn stream_load(&self) -> StreamLoad {
        StreamLoad {
            load: self.load.clone(),
            asked_in: None,
        }
    }

    /// Whether enough streams asked lately for the writers to wait for more
    /// requests after their first one.
    pub(crate) fn busy(&self) -> bool {
        self.load.busy()
    }

    /// Opens a stream; answers whether its conversation has an older
    /// active stream whose recorder died.
    pub(crate) async fn open(&self, opening: Opening) -> Result<bool, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.ask(Request::Open(opening, answer), answered).await
    }

    /// Records chunks on a stream opened with [`Self::open`], or opened by
    /// this append.
    pub(crate) async fn append(&self, append: Append) -> Result<AppendAnswer, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.ask(Request::Append(append, answer), answered).await
    }

    async fn ask<T>(
        &self,
        request: Request,
        answered: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if self.queue.send(request).await.is_err() {
            return Err(stopped());
        }
        answered.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// One writer's connection to the database: opened when first needed, on
/// which statements are planned once and commit asynchronously; replaced
/// after [`PLAN_LIFETIME`], so its plans follow the tables' statistics, and
/// dropped after a failed write, as it may be broken.
struct WriterConnection {
    unpooled: Unpooled,
    open: Option<(PgConnection, Instant)>,
}

impl WriterConnection {
    /// A connection to `pool`'s database, opened within its acquire timeout.
    fn new(pool: &PgPool) -> Self {
        let unpooled = Unpooled::new(pool, WRITER_APPLICATION_NAME).with_settings(&[
            ("plan_cache_mode", "force_generic_plan"),
            ("synchronous_commit", "off"),
        ]);
        Self {
            unpooled,
            open: None,
        }
    }

    /// The open connection, (re)opened if it is missing or old.
    async fn get(&mut self) -> Result<&mut PgConnection, StoreError> {
        if self
            .open
            .as_ref()
            .is_some_and(|(_, opened)| opened.elapsed() >= PLAN_LIFETIME)
        {
            self.close().await;
        }
        if self.open.is_none() {
            let connected = self.unpooled.open().await?;
            self.open = Some((connected, Instant::now()));
        }
        match &mut self.open {
            Some((connection, _)) => Ok(connection),
            None => Err(stopped()),
        }
    }

    /// Closes the connection, if open.
    async fn close(&mut self) {
        if let Some((connection, _)) = self.open.take() {
            let _ = connection.close().await;
        }
    }

    /// Writes `items` in one statement on the connection, dropping it when
    /// that fails.
    async fn write_all<I: Grouped>(&mut self, items: &[I]) -> Result<Vec<I::Outcome>, StoreError> {
        let written = I::write_all(self.get().await?, items).await;
        if written.is_err() {
            self.open = None;
        }
        written
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable(sqlx::Error::PoolClosed)
}

/// One writer.
struct Group {
    connection: WriterConnection,
    max: usize,
    delay: Duration,
    load: Arc<Load>,
}

impl Group {
    async fn run(mut self, requests: Arc<Mutex<mpsc::Receiver<Request>>>) {
        loop {
            let Some(taken) = self.take(&requests).await else {
                self.connection.close().await;
                return;
            };
            let mut opens = Vec::new();
            let mut appends = Vec::new();
            for request in taken {
                match request {
                    Request::Open(opening, answer) => opens.push((opening, answer)),
                    Request::Append(append, answer) => appends.push((append, answer)),
                }
            }
            if !opens.is_empty() {
                self.write(opens).await;
            }
            if !appends.is_empty() {
                self.write(appends).await;
            }
        }
    }

    /// The next request and whatever else has queued, up to the group size;
    /// `None` once the queue is gone.
    async fn take(&self, requests: &Mutex<mpsc::Receiver<Request>>) -> Option<Vec<Request>> {
        let mut requests = requests.lock().await;
        let first = requests.recv().await?;
        if self.load.busy() && !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let mut taken = vec![first];
        while taken.len() < self.max {
            match requests.try_recv() {
                Ok(request) => taken.push(request),
                Err(_) => break,
            }
        }
        Some(taken)
    }

    /// Writes `items` in one statement; when that fails and there were
    /// several, writes each alone, so one bad request fails only itself,
    /// unless the database could not be reached: then each fails with it.
    async fn write<I: Grouped>(&mut self, items: Vec<(I, Answer<I::Outcome>)>) {
        let (inputs, answers): (Vec<I>, Vec<_>) = items.into_iter().unzip();
        let failed = match self.connection.write_all(&inputs).await {
            Ok(outcomes) => {
                for (answer, outcome) in answers.into_iter().zip(outcomes) {
                    let _ = answer.send(Ok(outcome));
                }
                return;
            }
            Err(err) => err,
        };
        if answers.len() == 1 {
            if let Some(answer) = answers.into_iter().next() {
                let _ = answer.send(Err(failed));
            }
            return;
        }
        if matches!(failed, StoreError::Unavailable(_)) {
            for answer in answers {
                let unreachable = std::io::Error::other(failed.to_string());
                let _ = answer.send(Err(StoreError::Unavailable(sqlx::Error::Io(unreachable))));
            }
            return;
        }
        tracing::debug!(error = %failed, requests = answers.len(), "a grouped turn-stream write failed; writing each alone");
        for (input, answer) in inputs.into_iter().zip(answers) {
            let outcome = self
                .connection
                .write_all(std::slice::from_ref(&input))
                .await
                .and_then(|mut outcomes| outcomes.pop().ok_or_else(stopped));
            let _ = answer.send(outcome);
        }
    }
}

/// A kind of request written many at a time.
trait Grouped: Sized {
    /// How one request went.
    type Outcome;

    /// Writes `items` in one statement; one outcome per item, in order.
    async fn write_all(
        connection: &mut PgConnection,
        items: &[Self],
    ) -> Result<Vec<Self::Outcome>, StoreError>;
}

impl Grouped for Opening {
    type Outcome = bool;

    async fn write_all(
        connection: &mut PgConnection,
        items: &[Self],
    ) -> Result<Vec<bool>, StoreError> {
        turn_streams::open_many(connection, items).await
    }
}

impl Grouped for Append {
    type Outcome = AppendAnswer;

    async fn write_all(
        connection: &mut PgConnection,
        items: &[Self],
    ) -> Result<Vec<AppendAnswer>, StoreError> {
        turn_streams::append_many(connection, items).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load whose requests stay recent for the whole test.
    fn load(siblings: usize) -> Arc<Load> {
        Arc::new(Load::new(siblings, Duration::from_secs(3600)))
    }

    fn stream(load: &Arc<Load>) -> StreamLoad {
        StreamLoad {
            load: load.clone(),
            asked_in: None,
        }
    }

    #[test]
    fn open_streams_that_ask_nothing_do_not_make_the_writers_busy() {
        let load = load(3);
        let quiet: Vec<StreamLoad> = (0..10).map(|_| stream(&load)).collect();
        assert!(!load.busy());
        let mut asking: Vec<StreamLoad> = (0..3).map(|_| stream(&load)).collect();
        for stream in &mut asking {
            stream.asked();
        }
        assert!(load.busy(), "three streams asked");
        drop(quiet);
        assert!(load.busy(), "the quiet ones never counted");
    }

    #[test]
    fn one_stream_asking_often_counts_once_and_not_after_it_ends() {
        let load = load(2);
        let mut first = stream(&load);
        for _ in 0..5 {
            first.asked();
        }
        assert!(!load.busy(), "one stream, however many requests");
        let mut second = stream(&load);
        second.asked();
        assert!(load.busy());
        drop(first);
        assert!(!load.busy(), "a finished stream leaves the count");
    }

    #[test]
    fn counts_move_to_the_previous_window_then_lapse() {
        let mut recent = RecentStreams {
            window: 4,
            current: 3,
            previous: 2,
        };
        recent.roll_to(5);
        assert_eq!((recent.current, recent.previous), (0, 3));
        recent.current = 1;
        recent.roll_to(7);
        assert_eq!((recent.current, recent.previous), (0, 0));
    }
}
