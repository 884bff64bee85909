//! A turn's hold on its conversation: one turn at a time writes to a
//! conversation. The lease is short and renewed while the turn runs, so a
//! turn of a crashed process frees its conversation; a retried job takes
//! its own lease again at once (it holds it under the job's id).

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use toolserver_domain::{AccountId, AgentId};
use toolserver_store::turn_end::{self, TurnEnded};
use toolserver_store::turn_streams::Append;
use toolserver_store::{conversations, StoreError};
use uuid::Uuid;

use crate::ui::UiMessage;

/// Why a conversation could not be held or read.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another turn holds the conversation.
    #[error("another turn of this conversation is still running")]
    Busy,
    /// The conversation talks to another agent.
    #[error("this conversation belongs to another agent")]
    OtherAgent,
    /// The stored messages do not parse.
    #[error("the stored conversation is malformed: {0}")]
    Malformed(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl LeaseError {
    /// Whether waiting cannot help.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::OtherAgent | Self::Malformed(_))
    }
}

/// A turn's hold on its conversation; released when dropped if not before.
pub struct ConversationLease {
    pool: PgPool,
    account: AccountId,
    agent: AgentId,
    id: String,
    holder: Uuid,
    lease: Duration,
    stored: Vec<Value>,
    released: bool,
}

impl ConversationLease {
    /// Creates the conversation if new and takes it for one turn.
    pub async fn take(
        pool: &PgPool,
        account: &AccountId,
        id: &str,
        agent: AgentId,
        lease: Duration,
    ) -> Result<Self, LeaseError> {
        Self::take_as(pool, account, id, agent, lease, Uuid::now_v7()).await
    }

    /// Takes the conversation as `holder`, which may hold it already.
    pub async fn take_as(
        pool: &PgPool,
        account: &AccountId,
        id: &str,
        agent: AgentId,
        lease: Duration,
        holder: Uuid,
    ) -> Result<Self, LeaseError> {
        let stored = conversations::begin_turn(pool, account, id, agent, lease, holder)
            .await
            .map_err(|err| match err {
                StoreError::Conflict { constraint } if constraint == conversations::BUSY => {
                    LeaseError::Busy
                }
                StoreError::Conflict { constraint } if constraint == conversations::OTHER_AGENT => {
                    LeaseError::OtherAgent
                }
                other => LeaseError::Store(other),
            })?;
        Ok(Self {
            pool: pool.clone(),
            account: account.clone(),
            agent,
            id: id.to_owned(),
            holder,
            lease,
            stored,
            released: false,
        })
    }

    /// The agent the conversation talks to.
    pub fn agent(&self) -> AgentId {
        self.agent
    }

    /// The conversation's id.
    pub fn conversation_id(&self) -> &str {
        &self.id
    }

    /// The id the lease is held under.
    pub fn holder(&self) -> Uuid {
        self.holder
    }

    /// The messages stored when the lease was taken.
    pub fn stored_messages(&self) -> Result<Vec<UiMessage>, LeaseError> {
        serde_json::from_value(Value::Array(self.stored.clone()))
            .map_err(|err| LeaseError::Malformed(err.to_string()))
    }

    /// Stores `messages` as the conversation.
    pub async fn save(&self, messages: &[UiMessage]) -> Result<(), StoreError> {
        let values = message_values(messages);
        conversations::save(&self.pool, &self.account, &self.id, self.holder, &values).await
    }

    /// Renews the lease every third of its length until the returned task
    /// is aborted (or the lease is lost).
    pub fn keep_renewed(&self) -> tokio::task::JoinHandle<()> {
        let (pool, account, id, holder, lease) = (
            self.pool.clone(),
            self.account.clone(),
            self.id.clone(),
            self.holder,
            self.lease,
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                if let Err(err) = conversations::renew(&pool, &account, &id, holder, lease).await {
                    tracing::warn!(error = %err, "could not renew the conversation lease");
                    if matches!(err, StoreError::NotFound) {
                        return;
                    }
                }
            }
        })
    }

    /// Stores `messages` and lets the next turn in, in one write that also
    /// records `stream_end`, the turn's stream's last append (see
    /// [`turn_end::store_and_release`]). On an error the lease is still held.
    pub async fn store_and_release(
        &mut self,
        messages: &[UiMessage],
        stream_end: Option<&Append>,
    ) -> Result<TurnEnded, StoreError> {
        let values = message_values(messages);
        let ended = turn_end::store_and_release(
            &self.pool,
            &self.account,
            &self.id,
            self.holder,
            &values,
            stream_end,
        )
        .await?;
        self.released = true;
        Ok(ended)
    }

    /// Lets the next turn in.
    pub async fn release(mut self) {
        self.released = true;
        if let Err(err) =
            conversations::end_turn(&self.pool, &self.account, &self.id, self.holder).await
        {
            tracing::warn!(error = %err, "could not release the conversation; its lease will expire");
        }
    }

    /// Forgets the lease without releasing it: its holder changed (it
    /// passed to a job) or a commit released it.
    pub fn hand_over(mut self) {
        self.released = true;
    }
}

/// `messages` as stored.
fn message_values(messages: &[UiMessage]) -> Vec<Value> {
    messages
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok())
        .collect()
}

impl Drop for ConversationLease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (pool, account, id, holder) = (
            self.pool.clone(),
            self.account.clone(),
            self.id.clone(),
            self.holder,
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = conversations::end_turn(&pool, &account, &id, holder).await;
            });
        }
    }
}
