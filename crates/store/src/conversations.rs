//! The `conversations` table: each conversation's head (its messages are
//! rows, see [`crate::conversation_messages`]), and a lease so only one turn
//! at a time writes to a conversation.

use std::sync::LazyLock;
use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId};
use uuid::Uuid;

use crate::commit::UNFLUSHED;
use crate::conversation_messages::{
    message_list, messages_changed, stored_messages, tail_fits, tail_written, MessageTail,
};
use crate::StoreError;

/// SQL: the assignments that release a conversation's lease. The
/// `lease_process` of a free conversation names the process that last held
/// it: left as it is, a turn that takes the lease on the same process
/// changes no indexed column (`migrations/0032_conversation_leases_heap_only.sql`).
macro_rules! released {
    () => {
        "active_turn = NULL, lease_expires_at = NULL, lease_taken_at = NULL"
    };
}
pub(crate) use released;

/// `Conflict` constraint name: the conversation belongs to another agent.
pub const OTHER_AGENT: &str = "conversation_agent";
/// `Conflict` constraint name: another turn holds the conversation.
pub const BUSY: &str = "conversation_busy";

/// A stored conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationRecord {
    /// The client-chosen id.
    pub id: String,
    /// The agent the conversation talks to.
    pub agent_id: AgentId,
    /// UI messages in order.
    pub messages: Vec<Value>,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// Last change.
    pub updated_at: OffsetDateTime,
    /// The handoff to people it is under, if any (see [`crate::handoffs`]).
    pub handoff: Option<Value>,
}

#[derive(FromRow)]
struct ConversationRow {
    id: String,
    agent_id: Uuid,
    messages: Value,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    handoff: Option<Value>,
}

impl From<ConversationRow> for ConversationRecord {
    fn from(row: ConversationRow) -> Self {
        Self {
            id: row.id,
            agent_id: AgentId::from_uuid(row.agent_id),
            messages: message_list(row.messages),
            created_at: row.created_at,
            updated_at: row.updated_at,
            handoff: row.handoff,
        }
    }
}

/// Who takes a conversation's lease, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// The turn (or job) that holds it; every later write names it.
    pub holder: Uuid,
    /// The server process running the holder (see [`crate::processes`]).
    pub process: Uuid,
    /// How long the lease lasts unless renewed.
    pub lease: Duration,
}

/// How [`begin_turn`] went.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// The lease is the caller's.
    Held {
        /// Names the stored messages: the same head, the same messages.
        head: i64,
        /// The stored messages; `None` when they are those the caller
        /// knows (its head, or its write).
        messages: Option<Vec<Value>>,
        /// Whether the messages are stored as rows (false: not moved yet,
        /// so the next write must write them whole).
        moved: bool,
        /// Whether the caller's write was stored with the take.
        wrote: bool,
        /// When the holder took the lease (kept when it takes its own
        /// lease again).
        taken_at: OffsetDateTime,
        /// The handoff to people holding the conversation, if any (see
        /// [`crate::handoffs`]).
        handoff: Option<Value>,
    },
    /// The conversation is held by a turn whose process died (or whose
    /// lease lapsed) and that no job will run again: its turn is to be
    /// stored as interrupted ([`recover`]) before the conversation is taken.
    Abandoned(AbandonedTurn),
}

/// A lease whose holder will not come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbandonedTurn {
    /// The holder.
    pub holder: Uuid,
    /// When it took the lease (its turn streams opened at or after it);
    /// `None` for a lease taken before this was recorded.
    pub taken_at: Option<OffsetDateTime>,
}

/// SQL: whether the holder of the lease of conversation `c` (joined with
/// its process `p`) is gone: its lease lapsed, or its process stopped
/// renewing its row.
pub(crate) const HOLDER_GONE: &str = "(c.lease_expires_at <= now() OR p.alive_until <= now())";

/// SQL: whether the holder of conversation `c`'s lease is a job, which is
/// claimed again when its process dies and carries its turn on itself.
pub(crate) const HOLDER_IS_JOB: &str =
    "EXISTS (SELECT 1 FROM continuation_outbox j WHERE j.id = c.active_turn)";

/// SQL: whether [`begin_turn`]'s write goes with its take: the conversation
/// `c` is stored as rows under the head the taker knows (`$7`), and the
/// taker gave a write.
macro_rules! known_still {
    () => {
        "(c.head = $7 AND c.message_count IS NOT NULL AND $8 IS NOT NULL)"
    };
}

/// SQL of [`begin_turn`]: creates the conversation holding its lease, or
/// takes the lease of the existing one if it is free (or the caller's own)
/// and of the same agent; with the taker's write (`$8` its head, `$9` from,
/// `$10` total, `$11` the messages) if what it knows is still what is
/// stored (a new conversation stores nothing). One statement, committed
/// without waiting for the disk.
static TAKE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {UNFLUSHED}, \
         taken AS ( \
             INSERT INTO conversations AS c \
                 (account_id, id, agent_id, active_turn, lease_expires_at, lease_process, \
                  lease_taken_at, head, message_count) \
             SELECT $1, $2, $3, $4, now() + make_interval(secs => $5), $6, now(), \
                 CASE WHEN $7::bigint IS NULL AND $8::bigint IS NOT NULL THEN $8 \
                      ELSE nextval('conversation_heads') END, \
                 CASE WHEN $7::bigint IS NULL AND $8::bigint IS NOT NULL THEN $10 ELSE 0 END \
             FROM unflushed \
             ON CONFLICT (account_id, id) DO UPDATE SET active_turn = EXCLUDED.active_turn, \
                 lease_expires_at = EXCLUDED.lease_expires_at, \
                 lease_process = EXCLUDED.lease_process, \
                 lease_taken_at = CASE WHEN c.active_turn IS NOT DISTINCT FROM EXCLUDED.active_turn \
                                       THEN coalesce(c.lease_taken_at, now()) ELSE now() END, \
                 head = CASE WHEN {known} THEN $8 ELSE c.head END, \
                 message_count = CASE WHEN {known} THEN $10 ELSE c.message_count END, \
                 updated_at = CASE WHEN {known} THEN now() ELSE c.updated_at END \
             WHERE c.agent_id = EXCLUDED.agent_id \
               AND (c.active_turn IS NULL OR c.active_turn = EXCLUDED.active_turn) \
             RETURNING c.head, c.lease_taken_at, c.handoff, c.message_count), \
         dropped AS ( \
             DELETE FROM conversation_messages \
             WHERE account_id = $1 AND conversation_id = $2 AND seq >= $10 \
               AND EXISTS (SELECT 1 FROM taken WHERE head = $8)), \
         written AS ( \
             INSERT INTO conversation_messages (account_id, conversation_id, seq, message) \
             SELECT $1, $2, $9 + t.i::integer - 1, t.m::json \
             FROM taken, unnest($11::text[]) WITH ORDINALITY AS t(m, i) WHERE taken.head = $8 \
             ON CONFLICT (account_id, conversation_id, seq) \
             DO UPDATE SET message = EXCLUDED.message) \
         SELECT head, lease_taken_at, handoff, message_count, coalesce(head = $8, false) AS wrote \
         FROM taken",
        known = known_still!(),
    )
});

/// SQL of [`begin_turn`]'s read of the messages, once the lease is taken
/// (so that nobody else writes them).
const READ_MESSAGES: &str = concat!(
    "SELECT ",
    stored_messages!("c"),
    " FROM conversations c WHERE c.account_id = $1 AND c.id = $2"
);

/// SQL of [`begin_turn`]'s look at a conversation whose lease it could not
/// take; built once.
static HOLDER_OF: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT c.agent_id, c.active_turn, c.lease_taken_at, \
                (c.active_turn IS NOT NULL AND c.active_turn <> $3) AS other, \
                coalesce({HOLDER_GONE}, false) AS gone, {HOLDER_IS_JOB} AS job \
         FROM conversations c LEFT JOIN server_processes p ON p.id = c.lease_process \
         WHERE c.account_id = $1 AND c.id = $2"
    )
});

/// SQL of [`save`], committed without waiting for the disk; built once.
static SAVE_UNFLUSHED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {UNFLUSHED}, \
         owner AS ( \
             UPDATE conversations SET {changed} FROM unflushed \
             WHERE account_id = $1 AND id = $2 AND active_turn = $3 AND {fits} \
             RETURNING head), \
         {written} \
         SELECT head FROM owner",
        changed = messages_changed!(),
        fits = tail_fits!(),
        written = tail_written!(),
    )
});

/// Times [`begin_turn`] looks again at a conversation whose lease was freed
/// between its take and its look, before it answers `Conflict { BUSY }`.
const LOOKS: usize = 3;

/// What a taker of a conversation knows of its messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct Known<'a> {
    /// The head of the messages it has; `None`: it has none (it knows the
    /// conversation as new, if anything).
    pub head: Option<i64>,
    /// A write prepared against those messages (against none when `head`
    /// is `None`), to store with the take under a new head, if they are
    /// still the stored ones.
    pub write: Option<KnownWrite<'a>>,
}

/// A write that goes with a take.
#[derive(Debug, Clone, Copy)]
pub struct KnownWrite<'a> {
    /// The head the messages are stored under if it goes through; unlike
    /// the heads Postgres draws (positive), chosen by the taker (negative,
    /// and random).
    pub head: i64,
    /// What it stores.
    pub tail: &'a MessageTail,
}

/// Creates the conversation if new and takes its lease on `terms` (a lease
/// of another live holder is `Conflict { BUSY }`, and so is one of a job
/// whose process died, until the job runs again; a holder may take its own
/// lease again, as a retried job does; a conversation of another agent is
/// `Conflict { OTHER_AGENT }`). A lease whose holder is gone otherwise is
/// [`Begun::Abandoned`]: nothing is taken. With `known.write`, stores that
/// write in the same statement if `known.head` still names the stored
/// messages; the messages are read (a second statement) only when neither
/// `known.head` nor the write stands for them. Committed without waiting
/// for the disk (see [`crate::commit`]); a lease not free costs one more
/// statement.
#[tracing::instrument(skip(conn, known), fields(account.id = %account, agent.id = %agent))]
pub async fn begin_turn(
    conn: &mut sqlx::PgConnection,
    account: &AccountId,
    id: &str,
    agent: AgentId,
    terms: LeaseTerms,
    known: Known<'_>,
) -> Result<Begun, StoreError> {
    let (write_head, from, total, texts) = match known.write {
        Some(write) => {
            let (from, total) = write.tail.bounds()?;
            (
                Some(write.head),
                from,
                total,
                write.tail.messages.as_slice(),
            )
        }
        None => (None, 0, 0, &[][..]),
    };
    for _ in 0..LOOKS {
        let taken: Option<Taken> = sqlx::query_as(&TAKE)
            .bind(account.as_str())
            .bind(id)
            .bind(agent.as_uuid())
            .bind(terms.holder)
            .bind(terms.lease.as_secs_f64())
            .bind(terms.process)
            .bind(known.head)
            .bind(write_head)
            .bind(from)
            .bind(total)
            .bind(texts)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(taken) = taken {
            let unread = taken.wrote || Some(taken.head) == known.head;
            let messages = match (unread, taken.message_count) {
                (true, _) => None,
                (false, Some(0)) => Some(Vec::new()),
                (false, _) => {
                    let (stored,): (Value,) = sqlx::query_as(READ_MESSAGES)
                        .bind(account.as_str())
                        .bind(id)
                        .fetch_one(&mut *conn)
                        .await?;
                    Some(message_list(stored))
                }
            };
            return Ok(Begun::Held {
                head: taken.head,
                messages,
                moved: taken.message_count.is_some(),
                wrote: taken.wrote,
                taken_at: taken.lease_taken_at,
                handoff: taken.handoff,
            });
        }
        let held: Option<HeldBy> = sqlx::query_as(&HOLDER_OF)
            .bind(account.as_str())
            .bind(id)
            .bind(terms.holder)
            .fetch_optional(&mut *conn)
            .await?;
        let Some(held) = held else {
            continue;
        };
        if held.agent_id != agent.as_uuid() {
            return Err(StoreError::Conflict {
                constraint: OTHER_AGENT.into(),
            });
        }
        if held.other {
            return match (held.gone && !held.job, held.active_turn) {
                (true, Some(holder)) => Ok(Begun::Abandoned(AbandonedTurn {
                    holder,
                    taken_at: held.lease_taken_at,
                })),
                _ => Err(StoreError::Conflict {
                    constraint: BUSY.into(),
                }),
            };
        }
    }
    Err(StoreError::Conflict {
        constraint: BUSY.into(),
    })
}

#[derive(FromRow)]
struct Taken {
    head: i64,
    lease_taken_at: OffsetDateTime,
    handoff: Option<Value>,
    message_count: Option<i32>,
    wrote: bool,
}

#[derive(FromRow)]
struct HeldBy {
    agent_id: Uuid,
    active_turn: Option<Uuid>,
    lease_taken_at: Option<OffsetDateTime>,
    other: bool,
    gone: bool,
    job: bool,
}

/// Stores what `rewrite` makes of the messages of `account`'s conversation
/// `id` and frees the conversation, if `abandoned`'s holder still holds it
/// (false: someone else recovered it first, or its holder came back and
/// finished). `rewrite` answers `None` to keep the messages as they are.
#[tracing::instrument(skip(pool, rewrite), fields(account.id = %account))]
pub async fn recover<F>(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    abandoned: AbandonedTurn,
    rewrite: F,
) -> Result<bool, StoreError>
where
    F: FnOnce(Vec<Value>) -> Option<Vec<Value>> + Send,
{
    let found: Option<(Value,)> = sqlx::query_as(concat!(
        "SELECT ",
        stored_messages!("c"),
        " FROM conversations c WHERE c.account_id = $1 AND c.id = $2 AND c.active_turn = $3"
    ))
    .bind(account.as_str())
    .bind(id)
    .bind(abandoned.holder)
    .fetch_optional(pool)
    .await?;
    let Some((messages,)) = found else {
        return Ok(false);
    };
    let tail = rewrite(message_list(messages)).map(|messages| MessageTail::whole(&messages));
    let Some(tail) = tail else {
        return free(pool, account, id, abandoned.holder).await;
    };
    Ok(store_and_free(pool, account, id, abandoned.holder, &tail)
        .await?
        .is_some())
}

/// SQL of [`store_and_free`]; built once.
static STORE_AND_FREE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH owner AS ( \
             UPDATE conversations SET {changed}, {released} \
             WHERE account_id = $1 AND id = $2 AND active_turn = $3 AND {fits} \
             RETURNING head), \
         {written} \
         SELECT (SELECT head FROM owner)",
        changed = messages_changed!(),
        released = released!(),
        fits = tail_fits!(),
        written = tail_written!(),
    )
});

/// Stores `tail` of `account`'s conversation `id` and releases it, if
/// `holder` still holds it: the messages' new head, `None` when it did not
/// (nothing is written then).
pub(crate) async fn store_and_free<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
    account: &AccountId,
    id: &str,
    holder: Uuid,
    tail: &MessageTail,
) -> Result<Option<i64>, StoreError> {
    let (from, total) = tail.bounds()?;
    let (head,): (Option<i64>,) = sqlx::query_as(&STORE_AND_FREE)
        .bind(account.as_str())
        .bind(id)
        .bind(holder)
        .bind(from)
        .bind(total)
        .bind(&tail.messages)
        .fetch_one(executor)
        .await?;
    Ok(head)
}

/// Who holds a conversation's lease, as a stop request sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Nobody (or no such conversation).
    Nobody,
    /// A live turn or job, under this id.
    Live(Uuid),
    /// A turn (not a job) whose process died, or whose lease lapsed.
    Abandoned(AbandonedTurn),
}

/// Who holds `account`'s conversation `id`.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn holder(pool: &PgPool, account: &AccountId, id: &str) -> Result<Holder, StoreError> {
    let found: Option<(Option<Uuid>, Option<OffsetDateTime>, bool, bool)> =
        sqlx::query_as(&format!(
            "SELECT c.active_turn, c.lease_taken_at, coalesce({HOLDER_GONE}, false), \
                    {HOLDER_IS_JOB} \
             FROM conversations c LEFT JOIN server_processes p ON p.id = c.lease_process \
             WHERE c.account_id = $1 AND c.id = $2"
        ))
        .bind(account.as_str())
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Ok(match found {
        Some((Some(holder), taken_at, true, false)) => {
            Holder::Abandoned(AbandonedTurn { holder, taken_at })
        }
        Some((Some(holder), _, _, _)) => Holder::Live(holder),
        _ => Holder::Nobody,
    })
}

/// A conversation held by a turn whose process died, to recover.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct HeldByTheDead {
    /// The owning account.
    pub account_id: String,
    /// The conversation.
    pub id: String,
    /// The lease's holder.
    pub holder: Uuid,
    /// When it took the lease.
    pub taken_at: Option<OffsetDateTime>,
}

impl HeldByTheDead {
    /// The lease to recover.
    pub fn abandoned(&self) -> AbandonedTurn {
        AbandonedTurn {
            holder: self.holder,
            taken_at: self.taken_at,
        }
    }
}

/// Up to `limit` conversations whose lease is held by a turn (not a job)
/// of a process that stopped renewing its row: found through the dead
/// processes, so the cost follows what they held, not the table's size.
pub async fn held_by_the_dead(pool: &PgPool, limit: i64) -> Result<Vec<HeldByTheDead>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT c.account_id, c.id, c.active_turn AS holder, c.lease_taken_at AS taken_at \
         FROM server_processes p JOIN conversations c ON c.lease_process = p.id \
         WHERE p.alive_until <= now() AND c.active_turn IS NOT NULL AND NOT {HOLDER_IS_JOB} \
         LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Stores `tail` of the conversation's messages, if `turn_id` still holds
/// the lease (otherwise `NotFound`), and returns the messages' new head.
/// Commits without waiting for the disk (see [`crate::commit`]).
#[tracing::instrument(skip(pool, tail), fields(account.id = %account))]
pub async fn save(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
    tail: &MessageTail,
) -> Result<i64, StoreError> {
    let (from, total) = tail.bounds()?;
    let (head,): (i64,) = sqlx::query_as(&SAVE_UNFLUSHED)
        .bind(account.as_str())
        .bind(id)
        .bind(turn_id)
        .bind(from)
        .bind(total)
        .bind(&tail.messages)
        .fetch_one(pool)
        .await?;
    Ok(head)
}

/// Extends the lease held by `turn_id` to `lease` from now; `NotFound` when
/// the turn no longer holds it.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn renew(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
    lease: Duration,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE conversations SET lease_expires_at = now() + make_interval(secs => $4) \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(turn_id)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// Releases the lease held by `turn_id`, removing the conversation if it
/// still has no message.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn end_turn(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn_id: Uuid,
) -> Result<(), StoreError> {
    // A conversation that still has no message was created by this turn's
    // lease for a request that was then refused: it goes, rather than stay
    // behind empty and bound to the agent.
    let removed = sqlx::query(
        "DELETE FROM conversations \
         WHERE account_id = $1 AND id = $2 AND active_turn = $3 \
           AND coalesce(message_count, json_array_length(messages)) = 0",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(turn_id)
    .execute(pool)
    .await?;
    if removed.rows_affected() > 0 {
        return Ok(());
    }
    free(pool, account, id, turn_id).await?;
    Ok(())
}

/// Releases `account`'s conversation `id` if `holder` holds it, its
/// messages as they are; whether it did.
pub(crate) async fn free<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
    account: &AccountId,
    id: &str,
    holder: Uuid,
) -> Result<bool, StoreError> {
    let released = sqlx::query(concat!(
        "UPDATE conversations SET ",
        released!(),
        " WHERE account_id = $1 AND id = $2 AND active_turn = $3"
    ))
    .bind(account.as_str())
    .bind(id)
    .bind(holder)
    .execute(executor)
    .await?;
    Ok(released.rows_affected() > 0)
}

/// Reads one of `account`'s conversations.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
) -> Result<ConversationRecord, StoreError> {
    let row: ConversationRow = sqlx::query_as(concat!(
        "SELECT c.id, c.agent_id, ",
        stored_messages!("c"),
        " AS messages, c.created_at, c.updated_at, c.handoff FROM conversations c \
         WHERE c.account_id = $1 AND c.id = $2"
    ))
    .bind(account.as_str())
    .bind(id)
    .fetch_one(pool)
    .await?;
    Ok(row.into())
}

/// The agent of one of `account`'s conversations (`NotFound`: no such
/// conversation), without reading its messages.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn agent_of(pool: &PgPool, account: &AccountId, id: &str) -> Result<AgentId, StoreError> {
    let (agent,): (Uuid,) =
        sqlx::query_as("SELECT agent_id FROM conversations WHERE account_id = $1 AND id = $2")
            .bind(account.as_str())
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok(AgentId::from_uuid(agent))
}

/// Moves up to `limit` conversations stored whole (before their messages
/// were rows) and not held by a turn into rows; returns how many. Locked
/// rows are skipped: their holder's own write moves them.
pub async fn move_unmoved(pool: &PgPool, limit: i64) -> Result<u64, StoreError> {
    let (moved,): (i64,) = sqlx::query_as(
        "WITH picked AS ( \
             SELECT account_id, id, messages, json_typeof(messages) = 'array' AS listed \
             FROM conversations WHERE message_count IS NULL AND active_turn IS NULL \
             LIMIT $1 FOR UPDATE SKIP LOCKED), \
         written AS ( \
             INSERT INTO conversation_messages (account_id, conversation_id, seq, message) \
             SELECT p.account_id, p.id, t.i::integer - 1, t.m \
             FROM picked p, json_array_elements(p.messages) WITH ORDINALITY AS t(m, i) \
             WHERE p.listed \
             ON CONFLICT (account_id, conversation_id, seq) \
             DO UPDATE SET message = EXCLUDED.message), \
         moved AS ( \
             UPDATE conversations c SET head = nextval('conversation_heads'), \
                 message_count = CASE WHEN p.listed THEN json_array_length(p.messages) ELSE 0 END, \
                 messages = '[]'::json \
             FROM picked p WHERE c.account_id = p.account_id AND c.id = p.id RETURNING 1) \
         SELECT count(*) FROM moved",
    )
    .bind(limit)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(moved).unwrap_or_default())
}
