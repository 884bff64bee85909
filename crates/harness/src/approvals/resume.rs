//! Resuming a turn with the decisions on its assistant message's
//! approvals: a detached turn whose request carries them, exactly as a
//! chat client would send them.

use serde_json::json;
use toolserver_domain::{AccountId, AgentId, ConversationId};
use toolserver_store::approvals::{self, ApprovalRecord};
use uuid::Uuid;

use crate::conversation::TurnTrigger;
use crate::lifecycle::{DetachedReply, Lifecycle};
use crate::submission::{Submission, SubmitError};
use crate::ui::UiMessage;

impl Lifecycle {
    /// Resumes the turn of `message` (every approval of one assistant
    /// message, all decided); the detached turn's id, or `None` when it
    /// cannot resume now (the reaper tries again) or has nothing left to
    /// resume (the conversation moved on).
    pub(super) async fn resume_with(&self, message: &[ApprovalRecord]) -> Option<Uuid> {
        let first = message.first()?;
        let (account, conversation, message_id) = (
            first.account_id.as_str(),
            first.conversation_id.as_str(),
            first.message_id.as_str(),
        );
        let submission = match submission_of(message) {
            Ok(submission) => submission,
            Err(error) => {
                tracing::error!(%error, approval.id = %first.id, "cannot resume an approval");
                return None;
            }
        };
        let resumed = match self.submit_detached(submission, DetachedReply::Poll).await {
            Ok(turn) => Some(turn),
            Err(SubmitError::ApprovalNotPending(why)) => {
                tracing::info!(%why, approval.id = %first.id, "approvals answered elsewhere");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, approval.id = %first.id, "could not resume a turn after its approvals; the reaper tries again");
                return None;
            }
        };
        if let Err(err) =
            approvals::mark_resumed(self.pool(), account, conversation, message_id).await
        {
            tracing::warn!(error = %err, "could not mark approvals resumed");
        }
        resumed
    }
}

/// The request that answers `message`'s approvals, as its chat would.
fn submission_of(message: &[ApprovalRecord]) -> Result<Submission, String> {
    let first = message.first().ok_or("no approvals")?;
    let parts: Vec<_> = message
        .iter()
        .map(|approval| {
            json!({
                "type": format!("tool-{}", approval.tool),
                "toolCallId": approval.tool_call_id,
                "state": "approval-responded",
                "input": approval.input,
                "approval": {
                    "id": approval.id,
                    "approved": approval.approved(),
                    "reason": approval.reason,
                },
            })
        })
        .collect();
    let assistant: UiMessage = serde_json::from_value(json!({
        "id": first.message_id,
        "role": "assistant",
        "parts": parts,
    }))
    .map_err(|err| err.to_string())?;
    Ok(Submission {
        account: AccountId::parse(&first.account_id).map_err(|err| err.to_string())?,
        agent: AgentId::from_uuid(first.agent_id),
        conversation: ConversationId::from_stored(first.conversation_id.clone()),
        messages: vec![assistant],
        trigger: TurnTrigger::Submit,
        subject: first.subject.clone(),
    })
}
