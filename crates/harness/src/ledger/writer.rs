//! Group commit for the ledger: starts and ends queue up in the order they
//! happen, and one task writes whatever has queued since its last write,
//! starts before ends, in one statement each. Nothing waits for a write: a
//! call's tool is sent on its way as its start is queued. A start is held
//! for a moment (`hold`) before it is written: a call that ends within it
//! is written once, as one finished row, rather than inserted and then
//! updated; when the oldest held start is due, every finished one goes in
//! the same statement, so calls in a row share their writes. While the database cannot be reached every queued row is kept,
//! in order, and tried again; a row that fails alone for any other reason
//! is given up (logged) so it cannot hold up the others.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use toolserver_store::tool_calls::{self, AttemptEnd, AttemptRow, NewAttempt};
use toolserver_store::StoreError;
use uuid::Uuid;

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
        .max_connections(1)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .test_before_acquire(false)
        .connect_lazy_with(options)
}

/// How long the writer waits before trying again while the database cannot
/// be reached.
const RETRY: Duration = Duration::from_millis(500);

/// One request to the writer.
enum Write {
    Start(Box<NewAttempt>),
    End(AttemptEnd),
    /// Write everything held now, then answer.
    Flush(oneshot::Sender<()>),
}

/// The queue the writer takes from; it stops once every sender is dropped
/// and the queue is written.
#[derive(Clone)]
pub(super) struct LedgerWriter {
    queue: mpsc::UnboundedSender<Write>,
    /// Starts queued and not yet written (or given up).
    unwritten: Arc<AtomicUsize>,
    max_unwritten: usize,
}

impl LedgerWriter {
    /// Starts the writer on `pool`, writing up to `max_batch` rows of each
    /// kind per statement, holding each start for `hold`, and at most
    /// `max_unwritten` starts in all.
    pub(super) fn spawn(
        pool: &PgPool,
        max_batch: usize,
        hold: Duration,
        max_unwritten: usize,
    ) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        let unwritten = Arc::new(AtomicUsize::new(0));
        let writer = Writer {
            pool: writes_pool(pool),
            max_batch: max_batch.max(1),
            hold,
            unwritten: unwritten.clone(),
        };
        tokio::spawn(writer.run(requests));
        Self {
            queue,
            unwritten,
            max_unwritten,
        }
    }

    /// Queues `attempt`'s start; it is written before any end queued after
    /// it. Refused while the writer holds its most unwritten starts.
    pub(super) fn start(&self, attempt: NewAttempt) -> Result<(), String> {
        if self.unwritten.fetch_add(1, Ordering::Relaxed) >= self.max_unwritten {
            self.unwritten.fetch_sub(1, Ordering::Relaxed);
            return Err(format!(
                "the ledger is behind: {} calls wait to be recorded",
                self.max_unwritten
            ));
        }
        self.queue
            .send(Write::Start(Box::new(attempt)))
            .map_err(|_| "the ledger is shut down".to_owned())
    }

    /// Queues `end` to be written.
    pub(super) fn end(&self, end: AttemptEnd) {
        if self.queue.send(Write::End(end)).is_err() {
            tracing::error!("the ledger is shut down: an attempt's end was not recorded");
        }
    }

    /// Writes everything queued so far without holding it; returns whether
    /// it was written.
    pub(super) async fn flush(&self) -> bool {
        let (answer, answered) = oneshot::channel();
        self.queue.send(Write::Flush(answer)).is_ok() && answered.await.is_ok()
    }
}

/// What has been taken from the queue and not yet written.
#[derive(Default)]
struct Pending {
    /// Starts not yet written, by attempt, with their end once it came.
    held: HashMap<Uuid, AttemptRow>,
    /// The held starts in the order they came, with when each is due.
    due: VecDeque<(Uuid, Instant)>,
    /// Ends of attempts whose start has been written.
    ends: Vec<AttemptEnd>,
    /// Who waits for everything taken so far to be written.
    flushes: Vec<oneshot::Sender<()>>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.ends.is_empty() && self.flushes.is_empty()
    }

    fn take(&mut self, request: Write, hold: Duration) {
        match request {
            Write::Start(start) => {
                let id = start.id;
                let end = None;
                self.held.insert(id, AttemptRow { start: *start, end });
                self.due.push_back((id, Instant::now() + hold));
            }
            Write::End(end) => match self.held.get_mut(&end.id) {
                Some(row) => row.end = Some(end),
                None => self.ends.push(end),
            },
            Write::Flush(answer) => self.flushes.push(answer),
        }
    }

    /// When the first held start is due.
    fn next_due(&self) -> Option<Instant> {
        self.due.front().map(|(_, due)| *due)
    }

    /// The held rows to write now, in the order they came: once the first
    /// is due, every one due and every one finished (its end came, so
    /// holding it longer saves nothing, and it rides in the same
    /// statement); all of them when `all`; none before the first is due.
    fn ready(&mut self, all: bool) -> Vec<AttemptRow> {
        let now = Instant::now();
        if !all && self.next_due().is_none_or(|due| due > now) {
            return Vec::new();
        }
        let mut rows = Vec::new();
        let mut kept = VecDeque::with_capacity(self.due.len());
        for (id, due) in self.due.drain(..) {
            let finished = self.held.get(&id).is_some_and(|row| row.end.is_some());
            match all || due <= now || finished {
                true => rows.extend(self.held.remove(&id)),
                false => kept.push_back((id, due)),
            }
        }
        self.due = kept;
        rows
    }

    /// Holds `rows` again (they could not be written), due at once.
    fn hold_again(&mut self, rows: Vec<AttemptRow>) {
        let now = Instant::now();
        for row in rows.into_iter().rev() {
            self.due.push_front((row.start.id, now));
            self.held.insert(row.start.id, row);
        }
    }
}

/// The task writing the queue.
struct Writer {
    pool: PgPool,
    max_batch: usize,
    hold: Duration,
    unwritten: Arc<AtomicUsize>,
}

impl Writer {
    async fn run(self, mut requests: mpsc::UnboundedReceiver<Write>) {
        let mut pending = Pending::default();
        let mut open = true;
        while open || !pending.is_empty() {
            let next_due = pending.next_due();
            tokio::select! {
                request = requests.recv(), if open => match request {
                    Some(request) => pending.take(request, self.hold),
                    None => open = false,
                },
                () = sleep_until(next_due), if next_due.is_some() => {}
                else => {}
            }
            while pending.held.len() < self.max_batch && pending.ends.len() < self.max_batch {
                match requests.try_recv() {
                    Ok(request) => pending.take(request, self.hold),
                    Err(_) => break,
                }
            }
            let full = pending.held.len() >= self.max_batch;
            let flushing = !pending.flushes.is_empty();
            if !self.write(&mut pending, !open || full || flushing).await {
                tokio::time::sleep(RETRY).await;
            } else if flushing {
                for answer in pending.flushes.drain(..) {
                    let _ = answer.send(());
                }
            }
        }
    }

    /// Writes the ready starts, then the ends (an end updates its start's
    /// row); returns whether the database could be reached.
    async fn write(&self, pending: &mut Pending, all: bool) -> bool {
        let mut rows = pending.ready(all);
        let count = rows.len();
        if !write(&self.pool, &mut rows, write_rows, "starts").await {
            pending.hold_again(rows);
            return false;
        }
        self.unwritten.fetch_sub(count, Ordering::Relaxed);
        write(&self.pool, &mut pending.ends, write_ends, "ends").await
    }
}

/// Waits until `due`, or forever without one.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Writes `rows` with `statement`, emptying it; returns whether it could.
/// While the database cannot be reached they are all kept to try again.
/// Any other failure is one row's: each is then written alone, and one that
/// fails alone is given up (logged).
async fn write<T>(pool: &PgPool, rows: &mut Vec<T>, statement: Statement<T>, kind: &str) -> bool {
    if rows.is_empty() {
        return true;
    }
    match statement(pool, rows).await {
        Ok(()) => {
            rows.clear();
            true
        }
        Err(err @ StoreError::Unavailable(_)) => {
            tracing::warn!(error = %err, rows = rows.len(), kind, "could not record attempts; trying again");
            false
        }
        Err(_) => {
            for row in rows.drain(..) {
                if let Err(err) = statement(pool, std::slice::from_ref(&row)).await {
                    tracing::error!(error = %err, kind, "an attempt could not be recorded");
                }
            }
            true
        }
    }
}

/// One statement writing a group of rows.
type Statement<T> = for<'a> fn(&'a PgPool, &'a [T]) -> BoxFuture<'a, Result<(), StoreError>>;

fn write_rows<'a>(
    pool: &'a PgPool,
    rows: &'a [AttemptRow],
) -> BoxFuture<'a, Result<(), StoreError>> {
    tool_calls::record(pool, rows).boxed()
}

fn write_ends<'a>(
    pool: &'a PgPool,
    rows: &'a [AttemptEnd],
) -> BoxFuture<'a, Result<(), StoreError>> {
    tool_calls::end(pool, rows).boxed()
}

#[cfg(test)]
mod tests {
    use time::OffsetDateTime;
    use toolserver_domain::{AccountId, AttemptStatus, CallPath};
    use toolserver_store::tool_calls::Payload;

    use super::*;

    fn start() -> Write {
        Write::Start(Box::new(NewAttempt {
            id: Uuid::now_v7(),
            account: AccountId::parse("acct-a").unwrap(),
            subject: None,
            path: CallPath::Invoke,
            agent_id: None,
            conversation_id: None,
            turn_id: None,
            step: None,
            seq: None,
            tool_call_id: None,
            tool_name: "echo".into(),
            tool_id: None,
            tool_version: None,
            bundle_sha256: None,
            attempt: 1,
            payload_limit: 16,
            input: Payload::of("{}", 16),
            idempotency_key: None,
            trace_id: None,
            process_id: None,
            queued_at: OffsetDateTime::now_utc(),
            started_at: OffsetDateTime::now_utc(),
        }))
    }

    fn id_of(write: &Write) -> Uuid {
        match write {
            Write::Start(start) => start.id,
            Write::End(end) => end.id,
            Write::Flush(_) => Uuid::nil(),
        }
    }

    fn end_of(id: Uuid) -> Write {
        Write::End(AttemptEnd {
            id,
            status: AttemptStatus::Ok,
            output: None,
            error: None,
            ended_at: OffsetDateTime::now_utc(),
        })
    }

    fn ids(rows: &[AttemptRow]) -> Vec<Uuid> {
        rows.iter().map(|row| row.start.id).collect()
    }

    #[test]
    fn a_call_that_ends_while_its_start_is_held_is_one_finished_row() {
        let mut pending = Pending::default();
        let (first, second) = (start(), start());
        let (a, b) = (id_of(&first), id_of(&second));
        pending.take(first, Duration::from_secs(60));
        pending.take(second, Duration::from_secs(60));
        pending.take(end_of(a), Duration::ZERO);
        assert!(pending.ready(false).is_empty(), "nothing is due yet");
        assert!(pending.ends.is_empty(), "the end joined its held start");

        let rows = pending.ready(true);
        assert_eq!(ids(&rows), [a, b], "rows come in the order they came");
        assert!(rows[0].end.is_some() && rows[1].end.is_none());

        pending.take(end_of(b), Duration::ZERO);
        assert_eq!(pending.ends.len(), 1, "a written start's end updates it");
    }

    #[test]
    fn rows_that_could_not_be_written_go_first_and_are_due_at_once() {
        let hold = Duration::from_secs(60);
        let mut pending = Pending::default();
        let (first, second, third) = (start(), start(), start());
        let order = [id_of(&first), id_of(&second), id_of(&third)];
        pending.take(first, hold);
        pending.take(second, hold);
        let failed = pending.ready(true);
        pending.take(third, hold);
        pending.hold_again(failed);
        assert_eq!(ids(&pending.ready(false)), order[..2]);
        assert_eq!(ids(&pending.ready(true)), order[2..]);
        assert!(pending.is_empty());
    }

    #[test]
    fn once_the_oldest_start_is_due_finished_rows_ride_along_and_running_ones_wait() {
        let mut pending = Pending::default();
        let (oldest, finished, running) = (start(), start(), start());
        let ids_in = [id_of(&oldest), id_of(&finished), id_of(&running)];
        pending.take(oldest, Duration::ZERO);
        pending.take(finished, Duration::from_secs(60));
        pending.take(running, Duration::from_secs(60));
        pending.take(end_of(ids_in[1]), Duration::ZERO);
        assert_eq!(ids(&pending.ready(false)), ids_in[..2]);
        assert!(pending.ready(false).is_empty(), "the running call is held");
        assert_eq!(ids(&pending.ready(true)), ids_in[2..]);
    }
}
