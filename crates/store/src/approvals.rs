//! The `approvals` table: the tool calls turns stopped on for a person's
//! decision (`migrations/0025_approvals.sql`). A decision is taken once,
//! under a lock on the approvals of its assistant message, so exactly one
//! decision (the one that leaves none of them pending) resumes the turn.

use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};
use time::OffsetDateTime;
use toolserver_domain::AccountId;
use uuid::Uuid;

use crate::text::storable;
use crate::{accounts, StoreError};

/// Columns of an [`ApprovalRecord`], in its field order.
const COLUMNS: &str = "id, account_id, agent_id, conversation_id, message_id, tool_call_id, \
     tool, input, subject, approvers, why, status, reason, decided_by, created_at, expires_at, \
     decided_at, resumed_at";

/// An approval a turn asks for.
#[derive(Debug, Clone)]
pub struct NewApproval {
    /// Its id (the `approvalId` the client saw).
    pub id: String,
    /// The agent whose turn asked.
    pub agent_id: Uuid,
    /// The conversation.
    pub conversation_id: String,
    /// The assistant message holding the call.
    pub message_id: String,
    /// The call.
    pub tool_call_id: String,
    /// The tool's model-facing name.
    pub tool: String,
    /// The call's arguments.
    pub input: Value,
    /// The end user the turn acts for.
    pub subject: Option<String>,
    /// End users who may decide (empty: anyone of the account).
    pub approvers: Vec<String>,
    /// Why a person decides (the policies that ask, or `needsApproval`).
    pub why: String,
    /// SHA-256 of its one-time link's token.
    pub link_sha256: [u8; 32],
    /// When it lapses undecided (and the call is denied).
    pub expires_at: OffsetDateTime,
}

/// An approval as stored.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ApprovalRecord {
    /// Its id.
    pub id: String,
    /// The account.
    pub account_id: String,
    /// The agent whose turn asked.
    pub agent_id: Uuid,
    /// The conversation.
    pub conversation_id: String,
    /// The assistant message holding the call.
    pub message_id: String,
    /// The call.
    pub tool_call_id: String,
    /// The tool's model-facing name.
    pub tool: String,
    /// The call's arguments.
    pub input: Value,
    /// The end user the turn acts for.
    pub subject: Option<String>,
    /// End users who may decide (empty: anyone of the account).
    pub approvers: Vec<String>,
    /// Why a person decides.
    pub why: String,
    /// `pending`, `approved`, `denied` or `expired`.
    pub status: String,
    /// The reason given with the decision.
    pub reason: Option<String>,
    /// Who decided: `user:<sub>`, `account`, `link`, `chat` or `expiry`.
    pub decided_by: Option<String>,
    /// When the turn asked.
    pub created_at: OffsetDateTime,
    /// When it lapses undecided.
    pub expires_at: OffsetDateTime,
    /// When it was decided.
    pub decided_at: Option<OffsetDateTime>,
    /// When the turn resumed with its decision.
    pub resumed_at: Option<OffsetDateTime>,
}

impl ApprovalRecord {
    /// Whether it was approved.
    pub fn approved(&self) -> bool {
        self.status == "approved"
    }
}

/// A decision to record.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    /// `approved`, `denied` or `expired`.
    pub status: &'a str,
    /// The reason given, if any.
    pub reason: Option<&'a str>,
    /// Who decided (see [`ApprovalRecord::decided_by`]).
    pub decided_by: &'a str,
}

/// What [`decide`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// Recorded; `message` holds every approval of its assistant message
    /// when this decision was the last one pending there (the turn
    /// resumes), else is empty.
    Recorded {
        /// The approval as decided.
        approval: ApprovalRecord,
        /// The message's approvals, all decided, when this was the last.
        message: Vec<ApprovalRecord>,
    },
    /// It was decided before: nothing changed.
    AlreadyDecided(ApprovalRecord),
}

/// Records `approvals` of `account` on `conn` (recording the account if it
/// is new); one already recorded is left as it is.
pub async fn insert(
    conn: &mut PgConnection,
    account: &AccountId,
    approvals: &[NewApproval],
) -> Result<(), StoreError> {
    if approvals.is_empty() {
        return Ok(());
    }
    accounts::ensure(&mut *conn, account).await?;
    for approval in approvals {
        sqlx::query(
            "INSERT INTO approvals (id, account_id, agent_id, conversation_id, message_id, \
                 tool_call_id, tool, input, subject, approvers, why, link_sha256, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&approval.id)
        .bind(account.as_str())
        .bind(approval.agent_id)
        .bind(&approval.conversation_id)
        .bind(&approval.message_id)
        .bind(&approval.tool_call_id)
        .bind(&approval.tool)
        .bind(&approval.input)
        .bind(approval.subject.as_deref().map(storable))
        .bind(&approval.approvers)
        .bind(storable(&approval.why))
        .bind(&approval.link_sha256[..])
        .bind(approval.expires_at)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Whether `raw` is an approval id in form (`apr_` and 32 hex digits);
/// no other names an approval.
pub fn well_formed_id(raw: &str) -> bool {
    raw.strip_prefix("apr_")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The approval `id` of `account`.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
) -> Result<ApprovalRecord, StoreError> {
    if !well_formed_id(id) {
        return Err(StoreError::NotFound);
    }
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE account_id = $1 AND id = $2"
    ))
    .bind(account.as_str())
    .bind(id)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound)
}

/// The approval whose one-time link's token hashes to `sha256`, whatever
/// its account.
pub async fn by_link(pool: &PgPool, sha256: &[u8; 32]) -> Result<ApprovalRecord, StoreError> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE link_sha256 = $1"
    ))
    .bind(&sha256[..])
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound)
}

/// A page of `account`'s approvals, newest first: those with `status`
/// (any when `None`), in `conversation` (any when `None`), before the
/// cursor `(created_at, id)`.
pub async fn list(
    pool: &PgPool,
    account: &AccountId,
    status: Option<&str>,
    conversation: Option<&str>,
    before: Option<(OffsetDateTime, String)>,
    limit: i64,
) -> Result<Vec<ApprovalRecord>, StoreError> {
    let (before_at, before_id) = before.unzip();
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE account_id = $1 \
           AND ($2::text IS NULL OR status = $2) \
           AND ($3::text IS NULL OR conversation_id = $3) \
           AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5)) \
         ORDER BY created_at DESC, id DESC LIMIT $6"
    ))
    .bind(account.as_str())
    .bind(status)
    .bind(conversation)
    .bind(before_at)
    .bind(before_id)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Decides the approval `id` of `account` as `decision`, unless it was
/// decided before; see [`Decided`].
pub async fn decide(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    decision: &Decision<'_>,
) -> Result<Decided, StoreError> {
    if !well_formed_id(id) {
        return Err(StoreError::NotFound);
    }
    let mut tx = pool.begin().await?;
    let message: Option<(String, String)> = sqlx::query_as(
        "SELECT conversation_id, message_id FROM approvals WHERE account_id = $1 AND id = $2",
    )
    .bind(account.as_str())
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let (conversation, message) = message.ok_or(StoreError::NotFound)?;
    let siblings: Vec<ApprovalRecord> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals \
         WHERE account_id = $1 AND conversation_id = $2 AND message_id = $3 \
         ORDER BY created_at, id FOR UPDATE"
    ))
    .bind(account.as_str())
    .bind(&conversation)
    .bind(&message)
    .fetch_all(&mut *tx)
    .await?;
    let Some(current) = siblings.iter().find(|s| s.id == id) else {
        return Err(StoreError::NotFound);
    };
    if current.status != "pending" {
        return Ok(Decided::AlreadyDecided(current.clone()));
    }
    let approval: ApprovalRecord = sqlx::query_as(&format!(
        "UPDATE approvals SET status = $3, reason = $4, decided_by = $5, decided_at = now() \
         WHERE account_id = $1 AND id = $2 RETURNING {COLUMNS}"
    ))
    .bind(account.as_str())
    .bind(id)
    .bind(decision.status)
    .bind(decision.reason.map(storable))
    .bind(storable(decision.decided_by))
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    let last = siblings
        .iter()
        .all(|s| s.id == approval.id || s.status != "pending");
    let message = match last {
        true => siblings
            .into_iter()
            .map(|s| match s.id == approval.id {
                true => approval.clone(),
                false => s,
            })
            .collect(),
        false => Vec::new(),
    };
    Ok(Decided::Recorded { approval, message })
}

/// Marks the approvals of `account`'s assistant message `message` in
/// `conversation` as resumed (the turn carries their decisions on).
pub async fn mark_resumed(
    pool: &PgPool,
    account: &str,
    conversation: &str,
    message: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE approvals SET resumed_at = now() \
         WHERE account_id = $1 AND conversation_id = $2 AND message_id = $3 \
           AND status <> 'pending' AND resumed_at IS NULL",
    )
    .bind(account)
    .bind(conversation)
    .bind(message)
    .execute(pool)
    .await?;
    Ok(())
}

/// Records the decisions a chat request carried on `account`'s approvals
/// (`(id, approved, reason)`): decided by `chat` and resumed at once, as
/// that request runs the turn on; those decided before are left alone.
pub async fn settle_from_chat(
    pool: &PgPool,
    account: &AccountId,
    decisions: &[(String, bool, Option<String>)],
) -> Result<(), StoreError> {
    for (id, approved, reason) in decisions {
        sqlx::query(
            "UPDATE approvals SET status = $3, reason = $4, decided_by = 'chat', \
                 decided_at = now(), resumed_at = now() \
             WHERE account_id = $1 AND id = $2 AND status = 'pending'",
        )
        .bind(account.as_str())
        .bind(id)
        .bind(if *approved { "approved" } else { "denied" })
        .bind(reason.as_deref().map(storable))
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// Whether `account`'s conversation waits on an undecided approval, or
/// on decided ones its turn has not resumed with yet.
pub async fn waiting_on(
    pool: &PgPool,
    account: &AccountId,
    conversation: &str,
) -> Result<bool, StoreError> {
    let (waiting,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM approvals \
             WHERE account_id = $1 AND conversation_id = $2 AND resumed_at IS NULL)",
    )
    .bind(account.as_str())
    .bind(conversation)
    .fetch_one(pool)
    .await?;
    Ok(waiting)
}

/// Up to `limit` pending approvals (of any account) whose expiry passed.
pub async fn expired(pool: &PgPool, limit: i64) -> Result<Vec<ApprovalRecord>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at <= now() \
         ORDER BY expires_at LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Up to `limit` assistant messages (account, conversation, message) whose
/// approvals are all decided, some for longer than `grace_secs`, and whose
/// turn has not resumed: their resumption was lost (a server died, or the
/// conversation was busy).
pub async fn unresumed(
    pool: &PgPool,
    grace_secs: f64,
    limit: i64,
) -> Result<Vec<(String, String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT DISTINCT a.account_id, a.conversation_id, a.message_id FROM approvals a \
         WHERE a.status <> 'pending' AND a.resumed_at IS NULL \
           AND a.decided_at < now() - make_interval(secs => $1) \
           AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.account_id = a.account_id \
               AND p.conversation_id = a.conversation_id AND p.message_id = a.message_id \
               AND p.status = 'pending') \
         LIMIT $2",
    )
    .bind(grace_secs)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Every approval of `account`'s assistant message `message` in
/// `conversation`, oldest first.
pub async fn of_message(
    pool: &PgPool,
    account: &str,
    conversation: &str,
    message: &str,
) -> Result<Vec<ApprovalRecord>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals \
         WHERE account_id = $1 AND conversation_id = $2 AND message_id = $3 \
         ORDER BY created_at, id"
    ))
    .bind(account)
    .bind(conversation)
    .bind(message)
    .fetch_all(pool)
    .await?)
}

/// The address `account`'s new approvals are announced to, if any.
pub async fn webhook_of(pool: &PgPool, account: &AccountId) -> Result<Option<String>, StoreError> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT approval_webhook FROM account_policies WHERE account_id = $1")
            .bind(account.as_str())
            .fetch_optional(pool)
            .await?;
    Ok(row.and_then(|(url,)| url))
}
