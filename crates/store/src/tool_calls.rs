//! The `tool_calls` table: the ledger of every attempt of every tool call
//! (`migrations/0021_tool_calls.sql`). Inline attempts are written in
//! batches when they start and when they end; detached calls' attempts are
//! kept by the table's triggers; reads are account-scoped pages, newest
//! first, under a cursor.

use std::time::Duration;

use sqlx::{FromRow, PgPool, Postgres, QueryBuilder};
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AttemptStatus, CallPath, Sha256Digest};
use uuid::Uuid;

use crate::text::storable;
use crate::StoreError;

/// A payload as the ledger keeps it: the head of its JSON text, and the
/// digest and length of the whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// At most the row's payload limit in bytes, cut at a character boundary.
    pub head: String,
    /// SHA-256 of the whole text.
    pub sha256: Sha256Digest,
    /// Length of the whole text in bytes.
    pub bytes: i64,
}

impl Payload {
    /// `text`, kept to its first `limit` bytes.
    pub fn of(text: &str, limit: usize) -> Self {
        let mut end = text.len().min(limit);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            head: text[..end].to_owned(),
            sha256: Sha256Digest::of(text.as_bytes()),
            bytes: i64::try_from(text.len()).unwrap_or(i64::MAX),
        }
    }
}

/// An attempt that starts now.
#[derive(Debug, Clone)]
pub struct NewAttempt {
    /// Its id.
    pub id: Uuid,
    /// The account.
    pub account: AccountId,
    /// The end user (the token's subject), if known.
    pub subject: Option<String>,
    /// The path that made the call.
    pub path: CallPath,
    /// The agent whose turn made it.
    pub agent_id: Option<Uuid>,
    /// The conversation.
    pub conversation_id: Option<String>,
    /// The turn, as its client knows it.
    pub turn_id: Option<String>,
    /// The model pass (from 1).
    pub step: Option<i32>,
    /// The call's place in its pass (from 0).
    pub seq: Option<i32>,
    /// The model's call id.
    pub tool_call_id: Option<String>,
    /// The tool's name.
    pub tool_name: String,
    /// The uploaded tool, if it is one.
    pub tool_id: Option<Uuid>,
    /// Its version.
    pub tool_version: Option<i32>,
    /// Its bundle's digest (hex).
    pub bundle_sha256: Option<String>,
    /// From 1.
    pub attempt: i32,
    /// The payload limit it was written under.
    pub payload_limit: i32,
    /// The input.
    pub input: Payload,
    /// The key the tool gets as `ctx.idempotencyKey`.
    pub idempotency_key: Option<String>,
    /// The trace it ran in.
    pub trace_id: Option<String>,
    /// The server process running it.
    pub process_id: Option<Uuid>,
    /// When the call was made (it may wait for a slot before it starts).
    pub queued_at: OffsetDateTime,
    /// When it started: its tool was sent the call.
    pub started_at: OffsetDateTime,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub struct AttemptEnd {
    /// The attempt.
    pub id: Uuid,
    /// Its terminal status.
    pub status: AttemptStatus,
    /// Its output, if it returned one.
    pub output: Option<Payload>,
    /// Its error, if it failed.
    pub error: Option<String>,
    /// When it ended.
    pub ended_at: OffsetDateTime,
}

/// One attempt as stored.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AttemptRecord {
    /// Its id.
    pub id: Uuid,
    /// The end user.
    pub subject: Option<String>,
    /// The path that made the call.
    pub path: String,
    /// The agent.
    pub agent_id: Option<Uuid>,
    /// The conversation.
    pub conversation_id: Option<String>,
    /// The turn.
    pub turn_id: Option<String>,
    /// The model pass.
    pub step: Option<i32>,
    /// The place in the pass.
    pub seq: Option<i32>,
    /// The model's call id.
    pub tool_call_id: Option<String>,
    /// The tool's name.
    pub tool_name: String,
    /// The uploaded tool.
    pub tool_id: Option<Uuid>,
    /// Its version.
    pub tool_version: Option<i32>,
    /// Its bundle's digest.
    pub bundle_sha256: Option<String>,
    /// From 1.
    pub attempt: i32,
    /// Its status.
    pub status: String,
    /// The head of the input (`None` once payloads are pruned).
    pub input: Option<String>,
    /// SHA-256 of the whole input.
    pub input_sha256: Option<Vec<u8>>,
    /// Length of the whole input.
    pub input_bytes: Option<i64>,
    /// The head of the output.
    pub output: Option<String>,
    /// SHA-256 of the whole output.
    pub output_sha256: Option<Vec<u8>>,
    /// Length of the whole output.
    pub output_bytes: Option<i64>,
    /// The error.
    pub error: Option<String>,
    /// The idempotency key.
    pub idempotency_key: Option<String>,
    /// The trace.
    pub trace_id: Option<String>,
    /// A detached call's result id.
    pub result_id: Option<Uuid>,
    /// When it was made.
    pub queued_at: OffsetDateTime,
    /// When it started.
    pub started_at: OffsetDateTime,
    /// When it ended.
    pub ended_at: Option<OffsetDateTime>,
    /// When its payloads were pruned.
    pub payloads_pruned_at: Option<OffsetDateTime>,
}

/// Which attempts a page holds; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct AttemptFilter {
    /// The tool's name.
    pub tool_name: Option<String>,
    /// The status.
    pub status: Option<AttemptStatus>,
    /// The agent.
    pub agent_id: Option<Uuid>,
    /// The conversation.
    pub conversation_id: Option<String>,
    /// The end user.
    pub subject: Option<String>,
    /// Started at or after.
    pub since: Option<OffsetDateTime>,
    /// Started before.
    pub until: Option<OffsetDateTime>,
}

/// Where a page continues: after this attempt, in newest-first order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The last attempt's start.
    pub started_at: OffsetDateTime,
    /// The last attempt's id.
    pub id: Uuid,
}

const COLUMNS: &str = "id, subject, path, agent_id, conversation_id, turn_id, step, seq, \
     tool_call_id, tool_name, tool_id, tool_version, bundle_sha256, attempt, status, input, \
     input_sha256, input_bytes, output, output_sha256, output_bytes, error, idempotency_key, \
     trace_id, result_id, queued_at, started_at, ended_at, payloads_pruned_at";

/// An attempt to record: started, and already ended if `end` is set (a
/// call that ended before its start was written is one row, written once).
#[derive(Debug, Clone)]
pub struct AttemptRow {
    /// How it started.
    pub start: NewAttempt,
    /// How it ended, if it has.
    pub end: Option<AttemptEnd>,
}

/// Records `rows`, in one statement.
#[tracing::instrument(skip_all, fields(attempts = rows.len()))]
pub async fn record(pool: &PgPool, rows: &[AttemptRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    // Text from models and tools may hold NUL, which `text` cannot.
    let column = |f: fn(&AttemptRow) -> Option<&str>| {
        rows.iter()
            .map(|row| f(row).map(|text| storable(text).into_owned()))
            .collect::<Vec<_>>()
    };
    let starts = || rows.iter().map(|row| &row.start);
    let ends = || rows.iter().map(|row| row.end.as_ref());
    let outputs = || ends().map(|end| end.and_then(|end| end.output.as_ref()));
    let ids: Vec<Uuid> = starts().map(|a| a.id).collect();
    let accounts: Vec<String> = starts().map(|a| a.account.to_string()).collect();
    let paths: Vec<&str> = starts().map(|a| a.path.as_str()).collect();
    let agents: Vec<Option<Uuid>> = starts().map(|a| a.agent_id).collect();
    let steps: Vec<Option<i32>> = starts().map(|a| a.step).collect();
    let seqs: Vec<Option<i32>> = starts().map(|a| a.seq).collect();
    let tool_ids: Vec<Option<Uuid>> = starts().map(|a| a.tool_id).collect();
    let versions: Vec<Option<i32>> = starts().map(|a| a.tool_version).collect();
    let numbers: Vec<i32> = starts().map(|a| a.attempt).collect();
    let limits: Vec<i32> = starts().map(|a| a.payload_limit).collect();
    let heads: Vec<&str> = starts().map(|a| a.input.head.as_str()).collect();
    let digests: Vec<Vec<u8>> = starts()
        .map(|a| a.input.sha256.as_bytes().to_vec())
        .collect();
    let sizes: Vec<i64> = starts().map(|a| a.input.bytes).collect();
    let processes: Vec<Option<Uuid>> = starts().map(|a| a.process_id).collect();
    let queued: Vec<OffsetDateTime> = starts().map(|a| a.queued_at).collect();
    let started: Vec<OffsetDateTime> = starts().map(|a| a.started_at).collect();
    let statuses: Vec<&str> = ends()
        .map(|end| {
            end.map_or(AttemptStatus::Running, |end| end.status)
                .as_str()
        })
        .collect();
    let ended: Vec<Option<OffsetDateTime>> = ends().map(|end| end.map(|e| e.ended_at)).collect();
    let output_heads: Vec<Option<&str>> = outputs().map(|o| o.map(|o| o.head.as_str())).collect();
    let output_digests: Vec<Option<Vec<u8>>> = outputs()
        .map(|o| o.map(|o| o.sha256.as_bytes().to_vec()))
        .collect();
    let output_sizes: Vec<Option<i64>> = outputs().map(|o| o.map(|o| o.bytes)).collect();
    sqlx::query(
        "INSERT INTO tool_calls (id, account_id, subject, path, agent_id, conversation_id, \
             turn_id, step, seq, tool_call_id, tool_name, tool_id, tool_version, bundle_sha256, \
             attempt, payload_limit, input, input_sha256, input_bytes, idempotency_key, \
             trace_id, process_id, queued_at, started_at, status, ended_at, output, \
             output_sha256, output_bytes, error) \
         SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::uuid[], \
             $6::text[], $7::text[], $8::int4[], $9::int4[], $10::text[], $11::text[], \
             $12::uuid[], $13::int4[], $14::text[], $15::int4[], $16::int4[], $17::text[], \
             $18::bytea[], $19::int8[], $20::text[], $21::text[], $22::uuid[], \
             $23::timestamptz[], $24::timestamptz[], $25::text[], $26::timestamptz[], \
             $27::text[], $28::bytea[], $29::int8[], $30::text[])",
    )
    .bind(ids)
    .bind(accounts)
    .bind(column(|r| r.start.subject.as_deref()))
    .bind(paths)
    .bind(agents)
    .bind(column(|r| r.start.conversation_id.as_deref()))
    .bind(column(|r| r.start.turn_id.as_deref()))
    .bind(steps)
    .bind(seqs)
    .bind(column(|r| r.start.tool_call_id.as_deref()))
    .bind(column(|r| Some(r.start.tool_name.as_str())))
    .bind(tool_ids)
    .bind(versions)
    .bind(column(|r| r.start.bundle_sha256.as_deref()))
    .bind(numbers)
    .bind(limits)
    .bind(heads)
    .bind(digests)
    .bind(sizes)
    .bind(column(|r| r.start.idempotency_key.as_deref()))
    .bind(column(|r| r.start.trace_id.as_deref()))
    .bind(processes)
    .bind(queued)
    .bind(started)
    .bind(statuses)
    .bind(ended)
    .bind(output_heads)
    .bind(output_digests)
    .bind(output_sizes)
    .bind(column(|r| r.end.as_ref().and_then(|e| e.error.as_deref())))
    .execute(pool)
    .await?;
    Ok(())
}

/// Ends `ends`' attempts, in one statement; an attempt already ended (by
/// the sweep of a dead process's attempts) keeps its first end.
#[tracing::instrument(skip_all, fields(ends = ends.len()))]
pub async fn end(pool: &PgPool, ends: &[AttemptEnd]) -> Result<(), StoreError> {
    if ends.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = ends.iter().map(|e| e.id).collect();
    let statuses: Vec<&str> = ends.iter().map(|e| e.status.as_str()).collect();
    let heads: Vec<Option<&str>> = ends
        .iter()
        .map(|e| e.output.as_ref().map(|o| o.head.as_str()))
        .collect();
    let digests: Vec<Option<Vec<u8>>> = ends
        .iter()
        .map(|e| e.output.as_ref().map(|o| o.sha256.as_bytes().to_vec()))
        .collect();
    let sizes: Vec<Option<i64>> = ends
        .iter()
        .map(|e| e.output.as_ref().map(|o| o.bytes))
        .collect();
    let errors: Vec<Option<String>> = ends
        .iter()
        .map(|e| e.error.as_deref().map(|error| storable(error).into_owned()))
        .collect();
    let ended: Vec<OffsetDateTime> = ends.iter().map(|e| e.ended_at).collect();
    sqlx::query(
        "UPDATE tool_calls t SET status = e.status, ended_at = e.ended_at, output = e.output, \
             output_sha256 = e.output_sha256, output_bytes = e.output_bytes, error = e.error \
         FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::int8[], $6::text[], \
                     $7::timestamptz[]) \
             AS e(id, status, output, output_sha256, output_bytes, error, ended_at) \
         WHERE t.id = e.id AND t.status = 'running'",
    )
    .bind(ids)
    .bind(statuses)
    .bind(heads)
    .bind(digests)
    .bind(sizes)
    .bind(errors)
    .bind(ended)
    .execute(pool)
    .await?;
    Ok(())
}

/// Ends the running inline attempts, started more than `min_age` ago, of
/// server processes that are no longer alive (`server_lost`: they may have
/// run); returns how many. `min_age` spares a process that has just started
/// and not yet written its own liveness row.
#[tracing::instrument(skip(pool))]
pub async fn sweep_lost(pool: &PgPool, min_age: Duration, limit: i64) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "UPDATE tool_calls SET status = 'server_lost', ended_at = now(), \
             error = 'the server running the call stopped before its end was recorded; \
                      it may have run' \
         WHERE id IN (SELECT t.id FROM tool_calls t \
                      WHERE t.status = 'running' AND t.process_id IS NOT NULL \
                        AND t.started_at < now() - make_interval(secs => $2) \
                        AND NOT EXISTS (SELECT 1 FROM server_processes p \
                                        WHERE p.id = t.process_id AND p.alive_until > now()) \
                      LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind(limit)
    .bind(min_age.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Retention: drops the payloads of attempts that ended more than
/// `payloads` ago and the rows that ended more than `rows` ago, at most
/// `limit` of each; returns how many of each.
#[tracing::instrument(skip(pool))]
pub async fn prune(
    pool: &PgPool,
    payloads: Duration,
    rows: Duration,
    limit: i64,
) -> Result<(u64, u64), StoreError> {
    let stripped = sqlx::query(
        "UPDATE tool_calls SET input = NULL, output = NULL, payloads_pruned_at = now() \
         WHERE id IN (SELECT id FROM tool_calls \
                      WHERE ended_at < now() - make_interval(secs => $1) \
                        AND payloads_pruned_at IS NULL \
                      LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(payloads.as_secs_f64())
    .bind(limit)
    .execute(pool)
    .await?
    .rows_affected();
    let deleted = sqlx::query(
        "DELETE FROM tool_calls WHERE id IN (SELECT id FROM tool_calls \
             WHERE ended_at < now() - make_interval(secs => $1) \
             LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(rows.as_secs_f64())
    .bind(limit)
    .execute(pool)
    .await?
    .rows_affected();
    Ok((stripped, deleted))
}

/// One of `account`'s attempts.
#[tracing::instrument(skip(pool))]
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: Uuid,
) -> Result<AttemptRecord, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM tool_calls WHERE account_id = $1 AND id = $2");
    Ok(sqlx::query_as(&sql)
        .bind(account.as_str())
        .bind(id)
        .fetch_one(pool)
        .await?)
}

/// Up to `limit` of `account`'s attempts that `filter` admits, newest
/// first, after `cursor`.
#[tracing::instrument(skip(pool))]
pub async fn list(
    pool: &PgPool,
    account: &AccountId,
    filter: &AttemptFilter,
    cursor: Option<Cursor>,
    limit: i64,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let mut query: QueryBuilder<'_, Postgres> = QueryBuilder::new("SELECT ");
    query.push(COLUMNS);
    query.push(" FROM tool_calls WHERE account_id = ");
    query.push_bind(account.as_str());
    if let Some(tool_name) = &filter.tool_name {
        query.push(" AND tool_name = ").push_bind(tool_name.clone());
    }
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(agent_id) = filter.agent_id {
        query.push(" AND agent_id = ").push_bind(agent_id);
    }
    if let Some(conversation_id) = &filter.conversation_id {
        query
            .push(" AND conversation_id = ")
            .push_bind(conversation_id.clone());
    }
    if let Some(subject) = &filter.subject {
        query.push(" AND subject = ").push_bind(subject.clone());
    }
    if let Some(since) = filter.since {
        query.push(" AND started_at >= ").push_bind(since);
    }
    if let Some(until) = filter.until {
        query.push(" AND started_at < ").push_bind(until);
    }
    if let Some(cursor) = cursor {
        query
            .push(" AND (started_at, id) < (")
            .push_bind(cursor.started_at)
            .push(", ")
            .push_bind(cursor.id)
            .push(")");
    }
    query
        .push(" ORDER BY started_at DESC, id DESC LIMIT ")
        .push_bind(limit);
    Ok(query.build_query_as().fetch_all(pool).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_keeps_its_head_at_a_character_boundary_and_the_whole_digest() {
        let text = "\"héllo\"";
        let payload = Payload::of(text, 3);
        assert_eq!(payload.head, "\"h");
        assert_eq!(payload.bytes, 8);
        assert_eq!(payload.sha256, Sha256Digest::of(text.as_bytes()));
        assert_eq!(Payload::of(text, 100).head, text);
    }
}
