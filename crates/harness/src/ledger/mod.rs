//! The tool-call ledger (`toolserver_store::tool_calls`): every attempt of
//! an inline call is queued as started as its tool is sent the call, and
//! ended once; a writer off the hot path groups whatever has queued up into
//! one statement, starts before ends, and nothing waits for it. An attempt
//! whose end was never recorded (its server process died) is ended
//! `server_lost` by the keeper, which also applies the retention of
//! payloads and rows. Detached calls are recorded by the table's triggers.

mod attempt;
mod keeper;
mod key;
mod writer;

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AttemptStatus, CallPath, ToolId};
use toolserver_store::tool_calls::{NewAttempt, Payload};
use toolserver_store::ToolRecord;
use uuid::Uuid;

pub use attempt::Attempt;
pub use key::idempotency_key;

use self::writer::LedgerWriter;
use crate::tools::{Failure, RegisteredTool, ToolEvent, ToolEvents, ToolVersion};

/// How the ledger keeps its rows.
#[derive(Debug, Clone)]
pub struct LedgerSettings {
    /// Bytes of each input and output kept (their digest and length are
    /// kept whole).
    pub payload_bytes: usize,
    /// How long after its end an attempt keeps its payloads.
    pub payload_retention: Duration,
    /// How long after its end an attempt is kept at all.
    pub retention: Duration,
    /// How often dead processes' attempts are ended and retention applied.
    pub keeper_interval: Duration,
    /// How long an attempt must have run before it can be judged lost with
    /// its process (longer than a process takes to announce itself).
    pub lost_after: Duration,
    /// Most attempts one statement writes.
    pub max_batch: usize,
    /// How long a start waits to be written: a call that ends within it is
    /// written once, finished. A server process that dies loses the starts
    /// it holds.
    pub hold: Duration,
    /// Most attempts' starts the writer holds unwritten (while Postgres is
    /// slow or cannot be reached); a call beyond them does not run.
    pub max_unwritten: usize,
    /// Whether inline calls are recorded (detached calls always are, by
    /// the database); off only to measure what recording costs.
    pub recording: bool,
}

impl LedgerSettings {
    /// The defaults.
    pub const DEFAULT: Self = Self {
        payload_bytes: 64 * 1024,
        payload_retention: Duration::from_secs(30 * 86_400),
        retention: Duration::from_secs(365 * 86_400),
        keeper_interval: Duration::from_secs(5),
        lost_after: Duration::from_secs(30),
        max_batch: 512,
        hold: Duration::from_millis(20),
        max_unwritten: 50_000,
        recording: true,
    };
}

impl Default for LedgerSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Who made a call, and in which turn: the same for every call of a turn,
/// an invoke or an MCP request.
#[derive(Debug, Clone)]
pub struct CallScope {
    /// The account.
    pub account: AccountId,
    /// The end user (the token's subject), if known.
    pub subject: Option<String>,
    /// The path.
    pub path: CallPath,
    /// The agent.
    pub agent: Option<Uuid>,
    /// The conversation.
    pub conversation: Option<String>,
    /// The turn, as its client knows it.
    pub turn: Option<String>,
}

impl CallScope {
    /// The scope of a call outside any turn.
    pub fn direct(account: AccountId, path: CallPath) -> Self {
        Self {
            account,
            subject: None,
            path,
            agent: None,
            conversation: None,
            turn: None,
        }
    }
}

/// Where one call sits: its ids and place in its turn.
#[derive(Debug, Clone)]
pub struct CallPlace {
    /// The model's (or the request's) call id.
    pub tool_call_id: Option<String>,
    /// The model pass (from 1).
    pub step: Option<i32>,
    /// The place in the pass (from 0).
    pub seq: Option<i32>,
    /// The key the tool gets as `ctx.idempotencyKey`.
    pub idempotency_key: String,
    /// When the call was made.
    pub queued_at: OffsetDateTime,
    /// Which attempt of the call this is, from 1.
    pub attempt: i32,
}

/// The tool a call runs, as the ledger names it.
pub struct CalledTool<'a> {
    /// Its name.
    pub name: &'a str,
    /// The uploaded tool, if it is one.
    pub tool_id: Option<ToolId>,
    /// Its version.
    pub version: Option<ToolVersion>,
}

impl<'a> From<&'a RegisteredTool> for CalledTool<'a> {
    fn from(tool: &'a RegisteredTool) -> Self {
        Self {
            name: &tool.name,
            tool_id: tool.tool_id,
            version: tool.version.clone(),
        }
    }
}

impl<'a> From<&'a ToolRecord> for CalledTool<'a> {
    fn from(record: &'a ToolRecord) -> Self {
        Self {
            name: &record.name,
            tool_id: Some(record.id),
            version: Some(ToolVersion::of(record)),
        }
    }
}

/// How a turn records its calls: the ledger, and the turn's scope.
#[derive(Clone)]
pub struct TurnLedger {
    /// The ledger.
    pub ledger: Ledger,
    /// Who makes the turn's calls, and in which turn.
    pub scope: CallScope,
}

impl CallPlace {
    /// The place of a call outside any turn, known by `call_id` and
    /// keyed `idempotency_key`.
    pub fn direct(call_id: String, idempotency_key: String) -> Self {
        Self {
            tool_call_id: Some(call_id),
            step: None,
            seq: None,
            idempotency_key,
            queued_at: OffsetDateTime::now_utc(),
            attempt: 1,
        }
    }
}

impl TurnLedger {
    /// Records the turn's call of `tool` at `place` as refused before it ran.
    pub fn refused(
        &self,
        place: &CallPlace,
        tool: CalledTool<'_>,
        input: &Value,
        status: AttemptStatus,
        error: &str,
    ) {
        self.ledger
            .refused(&self.scope, place, tool, input, status, error);
    }
}

/// The ledger of this process's inline calls.
#[derive(Clone)]
pub struct Ledger {
    /// `None` when recording is off: attempts are not written.
    writer: Option<LedgerWriter>,
    settings: LedgerSettings,
    process: Option<Uuid>,
}

impl Ledger {
    /// Starts the writer and the keeper on `pool`; attempts name `process`
    /// as the process running them (within a Tokio runtime).
    pub fn start(pool: PgPool, process: Option<Uuid>, settings: LedgerSettings) -> Self {
        let writer = settings.recording.then(|| {
            LedgerWriter::spawn(
                &pool,
                settings.max_batch,
                settings.hold,
                settings.max_unwritten,
            )
        });
        keeper::spawn(pool, settings.clone());
        Self {
            writer,
            settings,
            process,
        }
    }

    /// Writes every attempt started or ended so far without holding it,
    /// waiting at most `within` (at shutdown, so a stopping process leaves
    /// its last calls on the record).
    pub async fn flush(&self, within: Duration) {
        let Some(writer) = &self.writer else {
            return;
        };
        if !matches!(tokio::time::timeout(within, writer.flush()).await, Ok(true)) {
            tracing::warn!(
                within_ms = within.as_millis() as u64,
                "the ledger could not write its last attempts before the process stopped"
            );
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LedgerSettings {
        &self.settings
    }

    /// `value` as the ledger keeps it.
    pub fn payload(&self, value: &Value) -> Payload {
        Payload::of(&value.to_string(), self.settings.payload_bytes)
    }

    /// Records an attempt of `tool` with `input` as started now; fails only
    /// once the ledger is shut down.
    pub fn begin(
        &self,
        scope: &CallScope,
        place: &CallPlace,
        tool: CalledTool<'_>,
        input: &Value,
    ) -> Result<Attempt, String> {
        self.begin_row(self.new_attempt(scope, place, tool, input))
    }

    /// Records a call refused before anything ran (its input, an approval),
    /// with `status` and why.
    pub fn refused(
        &self,
        scope: &CallScope,
        place: &CallPlace,
        tool: CalledTool<'_>,
        input: &Value,
        status: AttemptStatus,
        error: &str,
    ) {
        if let Ok(attempt) = self.begin(scope, place, tool, input) {
            attempt.ended(status, error);
        }
    }

    /// `events` of a call of `tool`, recorded: started as the call is sent
    /// (the first poll), ended by its final event, or cancelled when
    /// dropped first. A call the ledger cannot take (it is shut down) does
    /// not run.
    pub fn recorded(
        &self,
        scope: &CallScope,
        place: &CallPlace,
        tool: &RegisteredTool,
        input: &Value,
        events: ToolEvents,
    ) -> ToolEvents {
        if self.writer.is_none() {
            return events;
        }
        let row = self.new_attempt(scope, place, CalledTool::from(tool), input);
        let ledger = self.clone();
        futures::stream::once(async move {
            let mut attempt = match ledger.begin_row(row) {
                Ok(attempt) => Some(attempt),
                Err(message) => {
                    let failed = ToolEvent::Failed(Failure::tool(message));
                    return futures::stream::once(async move { failed }).boxed();
                }
            };
            events
                .map(move |event| {
                    if let Some(open) = attempt.take() {
                        attempt = open.end_by(&event);
                    }
                    event
                })
                .boxed()
        })
        .flatten()
        .boxed()
    }

    /// Queues `row`, made earlier, as started now.
    fn begin_row(&self, mut row: NewAttempt) -> Result<Attempt, String> {
        row.started_at = OffsetDateTime::now_utc();
        let id = row.id;
        if let Some(writer) = &self.writer {
            writer.start(row).map_err(|err| {
                format!("the call could not be recorded, so it did not run: {err}")
            })?;
        }
        Ok(Attempt::new(self.clone(), id))
    }

    /// An attempt's row as it starts.
    fn new_attempt(
        &self,
        scope: &CallScope,
        place: &CallPlace,
        tool: CalledTool<'_>,
        input: &Value,
    ) -> NewAttempt {
        NewAttempt {
            id: Uuid::now_v7(),
            account: scope.account.clone(),
            subject: scope.subject.clone(),
            path: scope.path,
            agent_id: scope.agent,
            conversation_id: scope.conversation.clone(),
            turn_id: scope.turn.clone(),
            step: place.step,
            seq: place.seq,
            tool_call_id: place.tool_call_id.clone(),
            tool_name: tool.name.to_owned(),
            tool_id: tool.tool_id.map(|id| id.as_uuid()),
            tool_version: tool.version.as_ref().map(|v| v.number),
            bundle_sha256: tool.version.and_then(|v| v.bundle_sha256),
            attempt: place.attempt,
            payload_limit: i32::try_from(self.settings.payload_bytes).unwrap_or(i32::MAX),
            input: self.payload(input),
            idempotency_key: Some(place.idempotency_key.clone()),
            trace_id: crate::trace_context::current_trace_id(),
            process_id: self.process,
            queued_at: place.queued_at,
            started_at: OffsetDateTime::now_utc(),
        }
    }
}
