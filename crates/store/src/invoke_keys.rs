//! Idempotency keys of direct calls (`migrations/0022_invoke_idempotency.sql`).
//!
//! Sequence: a request [`claim`]s its key before its call starts; then
//! either [`finish`] stores the call's result under it, [`release`] deletes
//! the claim of a request refused before its call reached a runner, or
//! [`interrupt`] records a call cut off before its end. A repeat finds the
//! key held and reads its state: running, done (with the result), or of
//! unknown outcome (interrupted, or running in a process that died). Every
//! write names its claim, so a claim whose key expired and was taken anew
//! never overwrites its successor.

use std::time::Duration;

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use toolserver_domain::{AccountId, ToolId};
use uuid::Uuid;

use crate::{accounts, StoreError};

/// Times [`claim`] tries to take or read a key that keeps changing hands.
const CLAIM_ATTEMPTS: usize = 3;

/// A request's claim on its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewClaim {
    /// The key as the client sent it.
    pub key: String,
    /// This claim's id, named by every later write.
    pub claim: Uuid,
    /// The tool the request calls.
    pub tool_id: ToolId,
    /// SHA-256 of the request's canonical body.
    pub fingerprint: [u8; 32],
    /// The server process that runs the call.
    pub process: Uuid,
    /// How long the key is kept from now.
    pub ttl: Duration,
}

/// What [`claim`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Claimed {
    /// The key was free (never used, or expired): it is this claim's now.
    Taken,
    /// An earlier request holds the key.
    Held(HeldKey),
    /// The key changed hands under every attempt to take or read it.
    Contended,
}

/// A key held by an earlier request.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldKey {
    /// The tool that request called.
    pub tool_id: ToolId,
    /// SHA-256 of that request's canonical body.
    pub fingerprint: Vec<u8>,
    /// Where its call stands.
    pub state: KeyState,
}

/// Where the call of a held key stands.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// It runs in a live server process.
    Running,
    /// It ended with this result.
    Done(Value),
    /// Nobody knows whether it ran: it was cut off before its end, or the
    /// process running it died.
    Unknown,
}

#[derive(FromRow)]
struct KeyRow {
    tool_id: Uuid,
    fingerprint: Vec<u8>,
    state: String,
    result: Option<Value>,
    owner_alive: bool,
}

impl From<KeyRow> for HeldKey {
    fn from(row: KeyRow) -> Self {
        let state = match (row.state.as_str(), row.result) {
            ("done", Some(result)) => KeyState::Done(result),
            ("running", _) if row.owner_alive => KeyState::Running,
            _ => KeyState::Unknown,
        };
        Self {
            tool_id: ToolId::from_uuid(row.tool_id),
            fingerprint: row.fingerprint,
            state,
        }
    }
}

/// Claims `new.key` for `account` unless an unexpired claim holds it; an
/// expired one is taken over.
#[tracing::instrument(skip_all, fields(account.id = %account))]
pub async fn claim(
    pool: &PgPool,
    account: &AccountId,
    new: &NewClaim,
) -> Result<Claimed, StoreError> {
    accounts::ensure(pool, account).await?;
    for _ in 0..CLAIM_ATTEMPTS {
        if take(pool, account, new).await? {
            return Ok(Claimed::Taken);
        }
        // Released or expired between the two statements: try again.
        if let Some(held) = read(pool, account, &new.key).await? {
            return Ok(Claimed::Held(held));
        }
    }
    Ok(Claimed::Contended)
}

/// Inserts the claim, or takes over an expired one; whether it did.
async fn take(pool: &PgPool, account: &AccountId, new: &NewClaim) -> Result<bool, StoreError> {
    let taken = sqlx::query(
        "INSERT INTO invoke_idempotency_keys AS k \
             (account_id, key, claim_id, tool_id, fingerprint, process_id, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7)) \
         ON CONFLICT (account_id, key) DO UPDATE SET \
             claim_id = EXCLUDED.claim_id, tool_id = EXCLUDED.tool_id, \
             fingerprint = EXCLUDED.fingerprint, process_id = EXCLUDED.process_id, \
             state = 'running', result = NULL, created_at = now(), \
             expires_at = EXCLUDED.expires_at \
         WHERE k.expires_at <= now()",
    )
    .bind(account.as_str())
    .bind(&new.key)
    .bind(new.claim)
    .bind(new.tool_id.as_uuid())
    .bind(new.fingerprint.as_slice())
    .bind(new.process)
    .bind(new.ttl.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(taken.rows_affected() == 1)
}

/// The unexpired claim on `key` of `account`, if any.
pub async fn read(
    pool: &PgPool,
    account: &AccountId,
    key: &str,
) -> Result<Option<HeldKey>, StoreError> {
    let row: Option<KeyRow> = sqlx::query_as(
        "SELECT k.tool_id, k.fingerprint, k.state, k.result, \
                EXISTS (SELECT 1 FROM server_processes p \
                        WHERE p.id = k.process_id AND p.alive_until > now()) AS owner_alive \
         FROM invoke_idempotency_keys k \
         WHERE k.account_id = $1 AND k.key = $2 AND k.expires_at > now()",
    )
    .bind(account.as_str())
    .bind(key)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(HeldKey::from))
}

/// Stores the result of `claim`'s call; whether the claim still held the
/// key.
pub async fn finish(
    pool: &PgPool,
    account: &AccountId,
    key: &str,
    claim: Uuid,
    result: &Value,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE invoke_idempotency_keys SET state = 'done', result = $4 \
         WHERE account_id = $1 AND key = $2 AND claim_id = $3 AND state = 'running'",
    )
    .bind(account.as_str())
    .bind(key)
    .bind(claim)
    .bind(result)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Records that `claim`'s call was cut off before its end: its outcome is
/// unknown until the key expires.
pub async fn interrupt(
    pool: &PgPool,
    account: &AccountId,
    key: &str,
    claim: Uuid,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE invoke_idempotency_keys SET state = 'interrupted' \
         WHERE account_id = $1 AND key = $2 AND claim_id = $3 AND state = 'running'",
    )
    .bind(account.as_str())
    .bind(key)
    .bind(claim)
    .execute(pool)
    .await?;
    Ok(())
}

/// Deletes `claim`, whose request was refused before its call reached a
/// runner: the key is free again.
pub async fn release(
    pool: &PgPool,
    account: &AccountId,
    key: &str,
    claim: Uuid,
) -> Result<(), StoreError> {
    sqlx::query(
        "DELETE FROM invoke_idempotency_keys \
         WHERE account_id = $1 AND key = $2 AND claim_id = $3 AND state = 'running'",
    )
    .bind(account.as_str())
    .bind(key)
    .bind(claim)
    .execute(pool)
    .await?;
    Ok(())
}

/// Deletes up to `limit` expired keys; returns how many.
pub async fn purge_expired(pool: &PgPool, limit: i64) -> Result<u64, StoreError> {
    let purged = sqlx::query(
        "DELETE FROM invoke_idempotency_keys WHERE (account_id, key) IN ( \
             SELECT account_id, key FROM invoke_idempotency_keys \
             WHERE expires_at <= now() \
             ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(purged.rows_affected())
}
