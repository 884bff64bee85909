//! Group commit for the ledger: starts and ends queue up, and one task
//! writes whatever has queued since its last write in one statement each.
//! A start is answered once it is written (its tool may then run); an end
//! is not waited for, and is tried again until it is written.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use toolserver_store::tool_calls::{self, AttemptEnd, NewAttempt};
use toolserver_store::StoreError;

/// How the writer's connections name themselves to Postgres.
const LEDGER_APPLICATION_NAME: &str = "toolserver-ledger-writer";

/// Connections of the writer's own, to `pool`'s database: not pinged
/// before each statement, planned once per statement
/// (`plan_cache_mode = force_generic_plan`: a group's arrays vary in
/// length), and committing asynchronously (`synchronous_commit = off`): a
/// write returns once it is in the WAL's buffers, which Postgres flushes
/// within a fraction of a second. A server process that dies loses nothing
/// written; a crash of Postgres itself can lose the last moment's rows.
fn writes_pool(pool: &PgPool) -> PgPool {
    let options = PgConnectOptions::clone(&pool.connect_options())
        .application_name(LEDGER_APPLICATION_NAME)
        .options([
            ("plan_cache_mode", "force_generic_plan"),
            ("synchronous_commit", "off"),
        ]);
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .test_before_acquire(false)
        .connect_lazy_with(options)
}

/// How long the writer waits before writing ends again after a failure.
const RETRY: Duration = Duration::from_millis(500);

/// One request to the writer.
enum Write {
    Start(Box<NewAttempt>, Answer),
    End(AttemptEnd),
}

/// The queue the writer takes from; it stops once every sender is dropped
/// and the queue is written.
#[derive(Clone)]
pub(super) struct LedgerWriter {
    queue: mpsc::UnboundedSender<Write>,
}

impl LedgerWriter {
    /// Starts the writer on `pool`, writing up to `max_batch` requests of
    /// each kind per statement.
    pub(super) fn spawn(pool: &PgPool, max_batch: usize) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(run(writes_pool(pool), requests, max_batch.max(1)));
        Self { queue }
    }

    /// Records `attempt` as started, once written.
    pub(super) async fn start(&self, attempt: NewAttempt) -> Result<(), String> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send(Write::Start(Box::new(attempt), answer))
            .map_err(|_| "the ledger is shut down".to_owned())?;
        answered
            .await
            .map_err(|_| "the ledger stopped".to_owned())?
    }

    /// Queues an attempt that started and ended at once (a refusal: nothing
    /// ran), without waiting for it to be written.
    pub(super) fn ended(&self, attempt: NewAttempt, end: AttemptEnd) {
        let (answer, _) = oneshot::channel();
        let queued = self.queue.send(Write::Start(Box::new(attempt), answer));
        if queued.is_err() || self.queue.send(Write::End(end)).is_err() {
            tracing::error!("the ledger is shut down: a refused call was not recorded");
        }
    }

    /// Queues `end` to be written.
    pub(super) fn end(&self, end: AttemptEnd) {
        if self.queue.send(Write::End(end)).is_err() {
            tracing::error!("the ledger is shut down: an attempt's end was not recorded");
        }
    }
}

async fn run(pool: PgPool, mut requests: mpsc::UnboundedReceiver<Write>, max_batch: usize) {
    let mut ends: Vec<AttemptEnd> = Vec::new();
    loop {
        let mut starts = Vec::new();
        if ends.is_empty() {
            match requests.recv().await {
                Some(request) => take(request, &mut starts, &mut ends),
                None => return,
            }
        }
        while starts.len() < max_batch && ends.len() < max_batch {
            match requests.try_recv() {
                Ok(request) => take(request, &mut starts, &mut ends),
                Err(_) => break,
            }
        }
        write_starts(&pool, starts).await;
        if !write_ends(&pool, &mut ends).await {
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// Writes `ends`, emptying it; returns whether it could. While the
/// database cannot be reached they are all kept to try again. Any other
/// failure is one end's: each is then written alone, and one that fails
/// alone is given up (logged), so it cannot hold up the others.
async fn write_ends(pool: &PgPool, ends: &mut Vec<AttemptEnd>) -> bool {
    match tool_calls::end(pool, ends).await {
        Ok(()) => {
            ends.clear();
            true
        }
        Err(err @ StoreError::Unavailable(_)) => {
            tracing::warn!(error = %err, ends = ends.len(), "could not record attempts' ends; trying again");
            false
        }
        Err(_) => {
            for end in ends.drain(..) {
                if let Err(err) = tool_calls::end(pool, std::slice::from_ref(&end)).await {
                    tracing::error!(error = %err, attempt.id = %end.id, "an attempt's end could not be recorded");
                }
            }
            true
        }
    }
}

fn take(request: Write, starts: &mut Vec<(NewAttempt, Answer)>, ends: &mut Vec<AttemptEnd>) {
    match request {
        Write::Start(attempt, answer) => starts.push((*attempt, answer)),
        Write::End(end) => ends.push(end),
    }
}

type Answer = oneshot::Sender<Result<(), String>>;

/// Writes `starts` and answers each. While the database cannot be reached
/// every start is refused (its call does not run); any other failure is one
/// start's, so each is then written alone and answered so.
async fn write_starts(pool: &PgPool, starts: Vec<(NewAttempt, Answer)>) {
    if starts.is_empty() {
        return;
    }
    let (rows, answers): (Vec<NewAttempt>, Vec<Answer>) = starts.into_iter().unzip();
    match tool_calls::start(pool, &rows).await {
        Ok(()) => {
            for answer in answers {
                let _ = answer.send(Ok(()));
            }
        }
        Err(err @ StoreError::Unavailable(_)) => {
            tracing::warn!(error = %err, starts = rows.len(), "could not record attempts' starts");
            for answer in answers {
                let _ = answer.send(Err(err.to_string()));
            }
        }
        Err(_) => {
            for (row, answer) in rows.into_iter().zip(answers) {
                let written = tool_calls::start(pool, std::slice::from_ref(&row)).await;
                let _ = answer.send(written.map_err(|err| err.to_string()));
            }
        }
    }
}
