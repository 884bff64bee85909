//! Launching a detached turn: the request's conversation lease passes to
//! the turn's `start` job, which this process runs at once.

use toolserver_domain::{AccountId, AgentId};
use toolserver_store::async_turns::{self, NewTurn};
use uuid::Uuid;

use super::{ConversationLease, Lifecycle, LifecycleError};

/// A detached turn ready to launch: the request has stored its message and
/// holds the conversation.
pub struct DetachedStart {
    /// The owning account.
    pub account: AccountId,
    /// The conversation, held by the request.
    pub lease: ConversationLease,
    /// Who hears how the turn went, besides its status.
    pub reply: DetachedReply,
    /// The end user the turn acts for, if known.
    pub subject: Option<String>,
}

/// Who hears how a detached turn went, besides its status (`GET /async/{id}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetachedReply {
    /// Nobody: the requester polls.
    Poll,
    /// A NATS requester, on this subject, hears the final result.
    Nats(String),
    /// The chat channel of this channel event hears each pass's answer.
    Channel(Uuid),
}

impl Lifecycle {
    /// Fails the open turns of `agent` before it is deleted, and tells
    /// their listeners.
    pub async fn agent_deleted(
        &self,
        account: &AccountId,
        agent: AgentId,
    ) -> Result<(), LifecycleError> {
        let failed =
            async_turns::fail_turns_of_agent(self.pool(), account, agent, "the agent was deleted")
                .await?;
        for turn_id in failed {
            self.0.listener.turn_settled(turn_id).await;
        }
        Ok(())
    }

    /// Records the turn and its `start` job, and runs the job in the
    /// background; returns the turn's status id.
    pub async fn launch(&self, start: DetachedStart) -> Result<Uuid, LifecycleError> {
        let DetachedStart {
            account,
            lease,
            reply,
            subject,
        } = start;
        let (reply_subject, channel_event) = match reply {
            DetachedReply::Poll => (None, None),
            DetachedReply::Nats(subject) => (Some(subject), None),
            DetachedReply::Channel(event) => (None, Some(event)),
        };
        let new_turn = NewTurn {
            agent: lease.agent(),
            conversation_id: lease.conversation_id().as_str(),
            lease_holder: lease.holder(),
            reply_subject: reply_subject.as_deref(),
            channel_event,
            end_user: subject.as_deref(),
            claim: self.claim_terms(),
        };
        let (turn_id, job) = async_turns::create(self.pool(), &account, new_turn).await?;
        lease.hand_over();
        tracing::info!(turn.id = %turn_id, job.id = %job.id, "detached turn launched");
        self.spawn_run(job, None);
        Ok(turn_id)
    }
}
