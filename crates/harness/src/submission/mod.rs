//! Starting a turn, whichever front-end asks for it (chat SSE, the chat
//! WebSocket, `/async`, NATS, chat channels): each adapts its request into one
//! [`Submission`], streamed ([`Lifecycle::submit_streamed`]) or detached
//! ([`Lifecycle::submit_detached`]); everything after is the same.
//!
//! Sequence: the agent is read and checked again (its tools may have
//! changed since it was saved) and its model chosen → the conversation is
//! leased (one turn at a time) → the request is fitted to the stored
//! conversation (approval decisions matched against pending approvals, the
//! size checked) and stored. Whatever can be refused is refused by then,
//! before anything runs. Then the turn is delivered: streamed (recorded,
//! then run in its own task; see `streamed.rs`) or detached (handed to a
//! `start` job: [`Lifecycle::launch`]).

mod error;
mod prepare;
mod streamed;

use tokio::sync::mpsc;
use toolserver_domain::{AccountId, AgentId, ConversationId};
use uuid::Uuid;

use crate::conversation::TurnTrigger;
use crate::lifecycle::{DetachedReply, DetachedStart, Lifecycle};
use crate::ui::UiMessage;
pub use error::SubmitError;

/// One turn, as any front-end asks for it.
#[derive(Debug)]
pub struct Submission {
    /// The account the turn runs for.
    pub account: AccountId,
    /// The agent to run.
    pub agent: AgentId,
    /// The conversation to continue (or start).
    pub conversation: ConversationId,
    /// The messages the client sent; the last one is the new input.
    pub messages: Vec<UiMessage>,
    /// Why the client asks.
    pub trigger: TurnTrigger,
    /// The end user the turn acts for (its token's subject), if known.
    pub subject: Option<String>,
}

impl Lifecycle {
    /// Checks `submission`, refusing whatever can be refused, and streams
    /// the turn to the request that asked: its chunks (JSON texts) arrive
    /// on the returned channel, each recorded first, until the turn has
    /// ended and its conversation is stored and free. Dropping the channel
    /// is the client leaving (see the agent's `onDisconnect`). The turn
    /// keeps `hold` (such as the account's place among its open turns)
    /// until it has ended.
    pub async fn submit_streamed(
        &self,
        submission: Submission,
        hold: Box<dyn Send>,
    ) -> Result<mpsc::Receiver<String>, SubmitError> {
        let (account, subject) = (submission.account.clone(), submission.subject.clone());
        let turn = prepare::prepare(self, submission).await?;
        streamed::launch(self, (&account, subject), turn, hold).await
    }

    /// Checks `submission`, refusing whatever can be refused, and runs the
    /// turn in the background; its status id. `reply` says who hears how
    /// it went.
    pub async fn submit_detached(
        &self,
        submission: Submission,
        reply: DetachedReply,
    ) -> Result<Uuid, SubmitError> {
        let (account, subject) = (submission.account.clone(), submission.subject.clone());
        let turn = prepare::prepare(self, submission).await?;
        let start = DetachedStart {
            account,
            lease: turn.lease,
            reply,
            subject,
        };
        Ok(self.launch(start).await?)
    }
}
