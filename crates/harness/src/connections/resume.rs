//! Resuming the calls that waited on authorizations: once none of its assistant message's authorizations
//! is pending, a detached turn runs the authorized calls (and fails the
//! others, naming why) and carries the turn on. Resumptions that were lost
//! (a process died, the conversation was busy) and authorizations nobody
//! completed in time are taken up by the reaper.

use toolserver_domain::{AccountId, AgentId, ConversationId};
use toolserver_store::oauth_authorizations::{self, AuthorizationRecord};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::{Authorizer, Connections, RefreshSweep, ACCOUNT_USER};
use crate::conversation::{AuthorizedCall, TurnTrigger};
use crate::lifecycle::{DetachedReply, Lifecycle};
use crate::submission::{Submission, SubmitError};
use crate::tools::http_context;

/// Rows one sweep handles at most.
const BATCH: i64 = 100;

/// How many refresh sweeps fit in the refresh-ahead window: a token gets
/// that many tries before it lapses, and a provider that is down is asked
/// no more often than that.
const REFRESH_SWEEPS_AHEAD: u32 = 10;

/// The shortest time between two refresh sweeps of one process.
const MIN_REFRESH_SWEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// What one sweep of authorizations and connections did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuthorizationSweep {
    /// Authorizations that lapsed unused (their calls fail).
    pub expired: u64,
    /// Turns resumed after their resumption was lost.
    pub resumed: u64,
    /// Connections refreshed ahead of expiry, and refreshes refused.
    pub refresh: RefreshSweep,
}

impl Lifecycle {
    /// Where connections are kept, refreshed and authorized.
    pub fn connections(&self) -> Connections {
        http_context(self.harness().sources()).connections()
    }

    /// What asks `user` (in `agent`'s `conversation` of `account`) to
    /// authorize the connections their turn's calls need.
    pub fn authorizer(
        &self,
        account: &AccountId,
        (agent, conversation): (Uuid, &str),
        user: Option<String>,
    ) -> Authorizer {
        Authorizer {
            connections: self.connections(),
            account: account.clone(),
            user,
            agent,
            conversation: conversation.to_owned(),
            redirect: self.oauth_redirect(),
            ttl: self.harness().settings().lifecycle.authorization_ttl,
        }
    }

    /// Moves `found` out of pending as `status`, then resumes its message's
    /// calls when none waits any more; the resumed turn, if one started.
    pub(super) async fn settle(
        &self,
        account: &AccountId,
        found: &AuthorizationRecord,
        status: &str,
        error: Option<&str>,
    ) -> Result<Option<Uuid>, StoreError> {
        let mut tx = self.pool().begin().await?;
        let moved =
            oauth_authorizations::complete(&mut tx, account, &found.id, status, error).await?;
        tx.commit().await?;
        Ok(self.resume_waiting(account, found, moved).await)
    }

    /// Resumes the call `found` held, when this process moved it out of
    /// pending (`moved`); the resumed turn, if one started.
    pub(super) async fn resume_waiting(
        &self,
        account: &AccountId,
        found: &AuthorizationRecord,
        moved: bool,
    ) -> Option<Uuid> {
        match (&found.waiting, moved) {
            (Some(waiting), true) => {
                self.resume_authorized(account, &waiting.conversation_id, &waiting.message_id)
                    .await
            }
            _ => None,
        }
    }

    /// This server's OAuth redirect: `<public URL>oauth/callback`.
    pub fn oauth_redirect(&self) -> url::Url {
        let public = &self.harness().settings().public_url;
        public
            .join("oauth/callback")
            .unwrap_or_else(|_| public.clone())
    }

    /// Resumes the calls of assistant message `message` that waited on
    /// authorizations, when none is pending any more; the detached turn's
    /// id, or `None` (nothing to resume now, or the reaper tries again).
    pub(super) async fn resume_authorized(
        &self,
        account: &AccountId,
        conversation: &str,
        message: &str,
    ) -> Option<Uuid> {
        let waits = match oauth_authorizations::of_message(
            self.pool(),
            account,
            conversation,
            message,
        )
        .await
        {
            Ok(waits) => waits,
            Err(err) => {
                tracing::warn!(error = %err, "could not read a message's authorizations; the reaper tries again");
                return None;
            }
        };
        if waits.iter().any(|wait| wait.status == "pending") {
            return None;
        }
        let submission = submission_of(account, &waits)?;
        let resumed = match self.submit_detached(submission, DetachedReply::Poll).await {
            Ok(turn) => Some(turn),
            Err(SubmitError::ApprovalNotPending(why)) => {
                tracing::info!(%why, "authorized calls were settled elsewhere");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not resume a turn after its authorizations; the reaper tries again");
                return None;
            }
        };
        if let Err(err) =
            oauth_authorizations::mark_resumed(self.pool(), account, conversation, message).await
        {
            tracing::warn!(error = %err, "could not mark authorizations resumed");
        }
        resumed
    }

    /// One sweep (see the module): lapsed authorizations fail their calls,
    /// lost resumptions resume, and connections about to lapse refresh.
    pub async fn reap_authorizations(&self) -> Result<AuthorizationSweep, StoreError> {
        let mut sweep = AuthorizationSweep::default();
        for found in oauth_authorizations::expired(self.pool(), BATCH).await? {
            let Ok(account) = AccountId::parse(&found.account_id) else {
                continue;
            };
            self.settle(&account, &found, "expired", Some(&lapsed(&found)))
                .await?;
            sweep.expired += 1;
        }
        let settings = &self.harness().settings().lifecycle;
        let grace = settings.approval_resume_grace.as_secs_f64();
        for (account, conversation, message) in
            oauth_authorizations::unresumed(self.pool(), grace, BATCH).await?
        {
            let Ok(account) = AccountId::parse(&account) else {
                continue;
            };
            if self
                .resume_authorized(&account, &conversation, &message)
                .await
                .is_some()
            {
                sweep.resumed += 1;
            }
        }
        let ahead = settings.connection_refresh_ahead;
        if self.refresh_sweep_due((ahead / REFRESH_SWEEPS_AHEAD).max(MIN_REFRESH_SWEEP)) {
            sweep.refresh = self.connections().refresh_due(ahead, BATCH).await?;
        }
        Ok(sweep)
    }
}

/// Why a lapsed authorization's call fails.
pub(super) fn lapsed(found: &AuthorizationRecord) -> String {
    format!(
        "nobody authorized {} by {}, when the authorization expired",
        found.provider, found.expires_at
    )
}

/// The detached turn that resumes `waits` (one message's authorizations,
/// none pending).
fn submission_of(account: &AccountId, waits: &[AuthorizationRecord]) -> Option<Submission> {
    let first = waits.iter().find_map(|wait| wait.waiting.as_ref())?;
    let calls = waits
        .iter()
        .filter_map(|wait| {
            let call = wait.waiting.as_ref()?;
            let outcome = match wait.status.as_str() {
                "authorized" => Ok(format!("connected to {}", wait.provider)),
                status => Err(wait.error.clone().unwrap_or_else(|| {
                    format!("the authorization of {} is {status}", wait.provider)
                })),
            };
            Some(AuthorizedCall {
                tool_call_id: call.tool_call_id.clone(),
                authorization_id: wait.id.clone(),
                outcome,
            })
        })
        .collect();
    let user = waits.first().map(|wait| wait.user_id.clone())?;
    Some(Submission {
        account: account.clone(),
        agent: AgentId::from_uuid(first.agent_id),
        conversation: ConversationId::from_stored(first.conversation_id.clone()),
        messages: Vec::new(),
        trigger: TurnTrigger::Authorized {
            message_id: first.message_id.clone(),
            calls,
        },
        subject: (user != ACCOUNT_USER).then_some(user),
    })
}
