//! Deciding an approval, from any client: who may, once, before it
//! expires; the decision that leaves none of its message's approvals
//! pending resumes the turn.

use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::approvals::{self, ApprovalRecord, Decision};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::LinkToken;
use crate::lifecycle::Lifecycle;

/// Who decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decider {
    /// A request with the account's token naming this end user.
    User(String),
    /// A request with the account's token naming no end user.
    Account,
    /// Whoever holds the one-time link.
    Link,
    /// Nobody decided in time.
    Expiry,
}

impl Decider {
    /// How the approval records it (`decided_by`).
    fn recorded(&self) -> String {
        match self {
            Self::User(sub) => format!("user:{sub}"),
            Self::Account => "account".to_owned(),
            Self::Link => "link".to_owned(),
            Self::Expiry => "expiry".to_owned(),
        }
    }
}

/// A decision taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// The approval as decided.
    pub approval: ApprovalRecord,
    /// The detached turn carrying the decisions on, when this decision
    /// was the last its message waited for and the turn resumed.
    pub resumed_turn: Option<Uuid>,
}

/// Why a decision was not taken.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// No such approval in this account (or no such link).
    #[error("no such approval")]
    NotFound,
    /// The approval names its approvers, and this end user is not one.
    #[error("only {0} may decide this approval")]
    NotAnApprover(String),
    /// It was decided before (by someone, or its link was used).
    #[error("the approval was already decided: {}", .0.status)]
    AlreadyDecided(Box<ApprovalRecord>),
    /// It expired undecided; the call was denied.
    #[error("the approval expired at {}; the call was denied", .0.expires_at)]
    Expired(Box<ApprovalRecord>),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Lifecycle {
    /// Decides `account`'s approval `id` (`approved`, with `reason`) as
    /// `decider`, resuming the turn when no approval of its message is left
    /// pending.
    pub async fn decide_approval(
        &self,
        account: &AccountId,
        id: &str,
        (approved, reason): (bool, Option<&str>),
        decider: Decider,
    ) -> Result<Decided, DecideError> {
        let approval = approvals::get(self.pool(), account, id)
            .await
            .map_err(not_found)?;
        if let Decider::User(sub) = &decider {
            if !approval.approvers.is_empty() && !approval.approvers.contains(sub) {
                return Err(DecideError::NotAnApprover(approval.approvers.join(", ")));
            }
        }
        if approval.status == "pending" && approval.expires_at <= OffsetDateTime::now_utc() {
            let expired = self.expire(account, &approval).await?;
            return Err(DecideError::Expired(Box::new(expired)));
        }
        let status = if approved { "approved" } else { "denied" };
        let recorded = decider.recorded();
        let decision = Decision {
            status,
            reason,
            decided_by: &recorded,
        };
        self.record_decision(account, id, &decision).await
    }

    /// Decides the approval whose one-time link carries `token`.
    pub async fn decide_by_link(
        &self,
        token: &str,
        (approved, reason): (bool, Option<&str>),
    ) -> Result<Decided, DecideError> {
        let token = LinkToken::parse(token).ok_or(DecideError::NotFound)?;
        let approval = approvals::by_link(self.pool(), &token.sha256())
            .await
            .map_err(not_found)?;
        let account = AccountId::parse(&approval.account_id).map_err(|_| DecideError::NotFound)?;
        self.decide_approval(&account, &approval.id, (approved, reason), Decider::Link)
            .await
    }

    /// Denies `approval`, pending past its expiry, with the expiry as the
    /// reason; the approval as it now stands.
    pub(super) async fn expire(
        &self,
        account: &AccountId,
        approval: &ApprovalRecord,
    ) -> Result<ApprovalRecord, DecideError> {
        let reason = format!(
            "nobody decided by {}, when the approval expired",
            approval.expires_at
        );
        let decision = Decision {
            status: "expired",
            reason: Some(&reason),
            decided_by: &Decider::Expiry.recorded(),
        };
        match self.record_decision(account, &approval.id, &decision).await {
            Ok(decided) => Ok(decided.approval),
            Err(DecideError::AlreadyDecided(now)) => Ok(*now),
            Err(other) => Err(other),
        }
    }

    /// Records `decision` and resumes the turn when it was the last one
    /// its message waited for.
    async fn record_decision(
        &self,
        account: &AccountId,
        id: &str,
        decision: &Decision<'_>,
    ) -> Result<Decided, DecideError> {
        match approvals::decide(self.pool(), account, id, decision)
            .await
            .map_err(not_found)?
        {
            approvals::Decided::AlreadyDecided(approval) => {
                Err(DecideError::AlreadyDecided(Box::new(approval)))
            }
            approvals::Decided::Recorded { approval, message } => {
                let resumed_turn = match message.is_empty() {
                    true => None,
                    false => self.resume_with(&message).await,
                };
                Ok(Decided {
                    approval,
                    resumed_turn,
                })
            }
        }
    }
}

/// A missing row is [`DecideError::NotFound`].
fn not_found(err: StoreError) -> DecideError {
    match err {
        StoreError::NotFound => DecideError::NotFound,
        other => DecideError::Store(other),
    }
}
