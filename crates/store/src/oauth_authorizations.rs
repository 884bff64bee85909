//! The `oauth_authorizations` table: the OAuth authorizations the server
//! started (`migrations/0028_oauth_connections.sql`), each with its PKCE
//! verifier (sealed; sealing and opening are the caller's) and, when a
//! tool call waits on it, that call. The provider's redirect finds one by
//! the SHA-256 of its `state` ([`by_state`]); it is completed once
//! ([`complete`]: by the redirect, or by the expiry sweep on [`expired`]
//! ones), and once every authorization an assistant message waits on is
//! completed, its turn resumes ([`mark_resumed`]; [`unresumed`] finds the
//! resumptions that were lost).

use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgConnection, PgPool, Row};
use time::OffsetDateTime;
use toolserver_domain::AccountId;
use uuid::Uuid;

use crate::text::storable;
use crate::{accounts, StoreError};

/// Columns an [`AuthorizationRecord`] is read from.
const COLUMNS: &str = "id, account_id, provider, user_id, verifier_sealed, agent_id, \
     conversation_id, message_id, tool_call_id, tool, status, error, expires_at, completed_at, \
     resumed_at, created_at";

/// The tool call that waits on an authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingCall {
    /// The agent whose turn made the call.
    pub agent_id: Uuid,
    /// The conversation.
    pub conversation_id: String,
    /// The assistant message holding the call.
    pub message_id: String,
    /// The call.
    pub tool_call_id: String,
    /// The tool's model-facing name.
    pub tool: String,
}

/// An authorization the server starts.
#[derive(Debug, Clone)]
pub struct NewAuthorization {
    /// Its id.
    pub id: String,
    /// The provider's name.
    pub provider: String,
    /// The end user it authorizes for (`""`: the account itself).
    pub user_id: String,
    /// SHA-256 of the `state` sent to the provider.
    pub state_sha256: Vec<u8>,
    /// The PKCE code verifier, sealed.
    pub verifier_sealed: Vec<u8>,
    /// The call that waits on it, if any.
    pub waiting: Option<WaitingCall>,
    /// When it lapses if the user never comes back.
    pub expires_at: OffsetDateTime,
}

/// An authorization as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationRecord {
    /// Its id.
    pub id: String,
    /// The account.
    pub account_id: String,
    /// The provider's name.
    pub provider: String,
    /// The end user it authorizes for (`""`: the account itself).
    pub user_id: String,
    /// The PKCE code verifier, sealed.
    pub verifier_sealed: Vec<u8>,
    /// The call that waits on it, if any.
    pub waiting: Option<WaitingCall>,
    /// `pending`, `authorized`, `failed` or `expired`.
    pub status: String,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// When it lapses if still pending.
    pub expires_at: OffsetDateTime,
    /// When it was completed.
    pub completed_at: Option<OffsetDateTime>,
    /// When the waiting call's turn resumed with it.
    pub resumed_at: Option<OffsetDateTime>,
    /// When it was started.
    pub created_at: OffsetDateTime,
}

impl<'r> FromRow<'r, PgRow> for AuthorizationRecord {
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        let agent_id: Option<Uuid> = row.try_get("agent_id")?;
        let conversation_id: Option<String> = row.try_get("conversation_id")?;
        let message_id: Option<String> = row.try_get("message_id")?;
        let tool_call_id: Option<String> = row.try_get("tool_call_id")?;
        let tool: Option<String> = row.try_get("tool")?;
        // The table's check keeps these all set or all unset.
        let waiting = match (agent_id, conversation_id, message_id, tool_call_id, tool) {
            (
                Some(agent_id),
                Some(conversation_id),
                Some(message_id),
                Some(tool_call_id),
                Some(tool),
            ) => Some(WaitingCall {
                agent_id,
                conversation_id,
                message_id,
                tool_call_id,
                tool,
            }),
            _ => None,
        };
        Ok(Self {
            id: row.try_get("id")?,
            account_id: row.try_get("account_id")?,
            provider: row.try_get("provider")?,
            user_id: row.try_get("user_id")?,
            verifier_sealed: row.try_get("verifier_sealed")?,
            waiting,
            status: row.try_get("status")?,
            error: row.try_get("error")?,
            expires_at: row.try_get("expires_at")?,
            completed_at: row.try_get("completed_at")?,
            resumed_at: row.try_get("resumed_at")?,
            created_at: row.try_get("created_at")?,
        })
    }
}

/// Records `rows` for `account` on `tx` (recording the account if it is
/// new); one whose id is already recorded is left as it is. Their
/// provider must be registered ([`StoreError::NotFound`] when it is not).
pub async fn insert(
    tx: &mut PgConnection,
    account: &AccountId,
    rows: &[NewAuthorization],
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    accounts::ensure(&mut *tx, account).await?;
    for row in rows {
        let waiting = row.waiting.as_ref();
        sqlx::query(
            "INSERT INTO oauth_authorizations (id, account_id, provider, user_id, \
                 state_sha256, verifier_sealed, agent_id, conversation_id, message_id, \
                 tool_call_id, tool, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&row.id)
        .bind(account.as_str())
        .bind(&row.provider)
        .bind(&row.user_id)
        .bind(&row.state_sha256)
        .bind(&row.verifier_sealed)
        .bind(waiting.map(|w| w.agent_id))
        .bind(waiting.map(|w| w.conversation_id.as_str()))
        .bind(waiting.map(|w| w.message_id.as_str()))
        .bind(waiting.map(|w| w.tool_call_id.as_str()))
        .bind(waiting.map(|w| w.tool.as_str()))
        .bind(row.expires_at)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// The authorization whose `state` hashes to `state_sha256`, whatever its
/// account; [`StoreError::NotFound`] when there is none.
pub async fn by_state(
    pool: &PgPool,
    state_sha256: &[u8],
) -> Result<AuthorizationRecord, StoreError> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_authorizations WHERE state_sha256 = $1"
    ))
    .bind(state_sha256)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound)
}

/// The authorization `id` of `account`; [`StoreError::NotFound`] when
/// there is none.
pub async fn get(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
) -> Result<AuthorizationRecord, StoreError> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_authorizations WHERE account_id = $1 AND id = $2"
    ))
    .bind(account.as_str())
    .bind(id)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound)
}

/// Moves a pending authorization to `status` ('authorized' | 'failed' |
/// 'expired') with `error`, completed_at = now(); false when it was no
/// longer pending (someone else completed it). [`StoreError::NotFound`]
/// when `account` has no authorization `id`; any other `status` is
/// refused by the table.
pub async fn complete(
    tx: &mut PgConnection,
    account: &AccountId,
    id: &str,
    status: &str,
    error: Option<&str>,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE oauth_authorizations SET status = $3, error = $4, completed_at = now() \
         WHERE account_id = $1 AND id = $2 AND status = 'pending'",
    )
    .bind(account.as_str())
    .bind(id)
    .bind(status)
    .bind(error.map(storable))
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() > 0 {
        return Ok(true);
    }
    let (found,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM oauth_authorizations WHERE account_id = $1 AND id = $2)",
    )
    .bind(account.as_str())
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    match found {
        true => Ok(false),
        false => Err(StoreError::NotFound),
    }
}

/// Moves every pending authorization of `account`'s end user `user` for
/// `provider` to 'authorized' (the user connected through another one);
/// the (conversation, message) of each that a call waited on.
pub async fn authorize_pending(
    tx: &mut PgConnection,
    account: &AccountId,
    provider: &str,
    user: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let rows: Vec<(Option<String>, Option<String>)> = sqlx::query_as(
        "UPDATE oauth_authorizations SET status = 'authorized', error = NULL, completed_at = now() \
         WHERE account_id = $1 AND provider = $2 AND user_id = $3 AND status = 'pending' \
         RETURNING conversation_id, message_id",
    )
    .bind(account.as_str())
    .bind(provider)
    .bind(user)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(conversation, message)| Some((conversation?, message?)))
        .collect())
}

/// Every authorization a call of this assistant message waited on (the
/// message `message` of `account`'s conversation `conversation`), oldest
/// first.
pub async fn of_message(
    pool: &PgPool,
    account: &AccountId,
    conversation: &str,
    message: &str,
) -> Result<Vec<AuthorizationRecord>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_authorizations \
         WHERE account_id = $1 AND conversation_id = $2 AND message_id = $3 \
         ORDER BY created_at, id"
    ))
    .bind(account.as_str())
    .bind(conversation)
    .bind(message)
    .fetch_all(pool)
    .await?)
}

/// Marks them resumed (resumed_at = now() where NULL and not pending): the
/// completed authorizations of `account`'s assistant message `message` in
/// `conversation`, whose turn carries them on.
pub async fn mark_resumed(
    pool: &PgPool,
    account: &AccountId,
    conversation: &str,
    message: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE oauth_authorizations SET resumed_at = now() \
         WHERE account_id = $1 AND conversation_id = $2 AND message_id = $3 \
           AND status <> 'pending' AND resumed_at IS NULL",
    )
    .bind(account.as_str())
    .bind(conversation)
    .bind(message)
    .execute(pool)
    .await?;
    Ok(())
}

/// Messages (account_id, conversation_id, message_id) whose waiting
/// authorizations are all completed (none pending), at least one not yet
/// resumed, completed more than `grace_secs` ago (the last of them: the
/// completion that resumes the turn gets the grace to do it): their
/// resumption was lost (a server died, or the conversation was busy). Of
/// any account, the longest waiting first, up to `limit`.
pub async fn unresumed(
    pool: &PgPool,
    grace_secs: f64,
    limit: i64,
) -> Result<Vec<(String, String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT a.account_id, a.conversation_id, a.message_id FROM oauth_authorizations a \
         WHERE a.status <> 'pending' AND a.resumed_at IS NULL \
           AND a.conversation_id IS NOT NULL \
           AND NOT EXISTS (SELECT 1 FROM oauth_authorizations p \
               WHERE p.account_id = a.account_id AND p.conversation_id = a.conversation_id \
                 AND p.message_id = a.message_id AND p.status = 'pending') \
         GROUP BY a.account_id, a.conversation_id, a.message_id \
         HAVING max(a.completed_at) < now() - make_interval(secs => $1) \
         ORDER BY max(a.completed_at) LIMIT $2",
    )
    .bind(grace_secs)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Pending authorizations past their expiry (any account), oldest first,
/// up to `limit`.
pub async fn expired(pool: &PgPool, limit: i64) -> Result<Vec<AuthorizationRecord>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM oauth_authorizations \
         WHERE status = 'pending' AND expires_at <= now() \
         ORDER BY expires_at LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await?)
}
