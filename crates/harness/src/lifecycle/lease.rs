//! A turn's hold on its conversation: one turn at a time writes to a
//! conversation. The lease names its holder's server process and is renewed
//! while the turn runs. When the process dies (it stops renewing its
//! liveness row) or the lease lapses, the next taker first stores the dead
//! turn as far as its stream was recorded, marked interrupted (see
//! [`super::recover`]), then takes the conversation, so nothing a client was
//! shown is missing from the record, and the conversation reads in the
//! order things happened. A lease held by a job is not taken over: the job
//! is claimed again within the same bound and takes its own lease again at
//! once (it holds it under the job's id), writing its turn's state before
//! any later turn can begin.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId, ConversationId};
use toolserver_store::conversations::{Begun, Known, KnownWrite, LeaseTerms};
use toolserver_store::turn_end::{self, TurnEnded};
use toolserver_store::turn_streams::Append;
use toolserver_store::{conversations, StoreError};
use uuid::Uuid;

use super::messages::{PendingWrite, StoredMessages};
use super::Lifecycle;
use crate::stream::StreamError;
use crate::ui::UiMessage;

/// Abandoned leases recovered in a row before a take gives up as busy (each
/// recovery frees the conversation; another taker may win it meanwhile).
const RECOVERIES: usize = 3;

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
    /// The interrupted turn of a dead holder could not be read.
    #[error("the conversation's interrupted turn could not be read: {0}")]
    Stream(#[from] StreamError),
}

impl LeaseError {
    /// Whether waiting cannot help.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::OtherAgent | Self::Malformed(_) => true,
            Self::Stream(stream) => !stream.is_transient(),
            Self::Busy | Self::Store(_) => false,
        }
    }
}

/// A turn's hold on its conversation; released when dropped if not before.
pub struct ConversationLease {
    pool: PgPool,
    account: AccountId,
    agent: AgentId,
    id: ConversationId,
    holder: Uuid,
    lease: Duration,
    taken_at: OffsetDateTime,
    stored: Arc<StoredMessages>,
    handoff: Option<Value>,
    released: bool,
}

impl ConversationLease {
    /// Creates the conversation if new and takes it for one turn.
    pub async fn take(
        lifecycle: &Lifecycle,
        account: &AccountId,
        id: &ConversationId,
        agent: AgentId,
    ) -> Result<Self, LeaseError> {
        Self::take_as(lifecycle, account, id, agent, Uuid::now_v7()).await
    }

    /// [`Self::take`], storing `write` with the take if `assumed` (the
    /// messages `write` was prepared against) are still the stored ones;
    /// answers whether it was stored. When it was not, the caller prepares
    /// its write again against [`Self::stored_messages`].
    pub async fn take_writing(
        lifecycle: &Lifecycle,
        account: &AccountId,
        id: &ConversationId,
        agent: AgentId,
        assumed: &Arc<StoredMessages>,
        write: PendingWrite,
    ) -> Result<(Self, bool), LeaseError> {
        let holder = Uuid::now_v7();
        Self::take_with(
            lifecycle,
            account,
            id,
            agent,
            holder,
            Some((assumed, write)),
        )
        .await
    }

    /// Takes the conversation as `holder`, which may hold it already; a
    /// turn whose process died is recovered first.
    pub async fn take_as(
        lifecycle: &Lifecycle,
        account: &AccountId,
        id: &ConversationId,
        agent: AgentId,
        holder: Uuid,
    ) -> Result<Self, LeaseError> {
        let (lease, _) = Self::take_with(lifecycle, account, id, agent, holder, None).await?;
        Ok(lease)
    }

    async fn take_with(
        lifecycle: &Lifecycle,
        account: &AccountId,
        id: &ConversationId,
        agent: AgentId,
        holder: Uuid,
        mut writing: Option<(&Arc<StoredMessages>, PendingWrite)>,
    ) -> Result<(Self, bool), LeaseError> {
        let pool = lifecycle.pool();
        let terms = LeaseTerms {
            holder,
            process: lifecycle.process().id(),
            lease: lifecycle.turn_lease(),
        };
        let write_head = chosen_head();
        for _ in 0..=RECOVERIES {
            let cached = lifecycle.messages().get(account, id.as_str());
            let known = match &writing {
                Some((assumed, write)) => Known {
                    head: assumed.head(),
                    write: Some(KnownWrite {
                        head: write_head,
                        tail: write.tail(),
                    }),
                },
                None => Known {
                    head: cached.as_ref().and_then(|stored| stored.head()),
                    write: None,
                },
            };
            let mut held = lifecycle.turn_connections().take().await?;
            let begun = conversations::begin_turn(
                held.connection(),
                account,
                id.as_str(),
                agent,
                terms,
                known,
            )
            .await;
            held.done(&begun);
            let begun = begun.map_err(lease_error)?;
            let (head, messages, moved, wrote, taken_at, handoff) = match begun {
                Begun::Held {
                    head,
                    messages,
                    moved,
                    wrote,
                    taken_at,
                    handoff,
                } => (head, messages, moved, wrote, taken_at, handoff),
                Begun::Abandoned(abandoned) => {
                    lifecycle.recover(account, id.as_str(), abandoned).await?;
                    continue;
                }
            };
            let known_messages = match writing.take() {
                Some((_, write)) if wrote => Some(Arc::new(write.stored(head))),
                Some((assumed, _)) => Some(Arc::clone(assumed)),
                None => cached,
            };
            let stored = match (messages, known_messages) {
                (None, Some(known)) => known,
                (values, _) => {
                    let values = values.unwrap_or_default();
                    match StoredMessages::parse(head, moved, values) {
                        Ok(stored) => Arc::new(stored),
                        Err(err) => {
                            let _ =
                                conversations::end_turn(pool, account, id.as_str(), holder).await;
                            return Err(LeaseError::Malformed(err.to_string()));
                        }
                    }
                }
            };
            let lease = Self {
                pool: pool.clone(),
                account: account.clone(),
                agent,
                id: id.clone(),
                holder,
                lease: terms.lease,
                taken_at,
                stored,
                handoff,
                released: false,
            };
            return Ok((lease, wrote));
        }
        Err(LeaseError::Busy)
    }

    /// The agent the conversation talks to.
    pub fn agent(&self) -> AgentId {
        self.agent
    }

    /// The conversation's id.
    pub fn conversation_id(&self) -> &ConversationId {
        &self.id
    }

    /// The id the lease is held under.
    pub fn holder(&self) -> Uuid {
        self.holder
    }

    /// When the holder took the lease (the streams of its turn opened at
    /// or after it).
    pub fn taken_at(&self) -> Option<OffsetDateTime> {
        Some(self.taken_at)
    }

    /// The handoff to people the conversation was under when the lease was
    /// taken, if any.
    pub fn handoff(&self) -> Option<&Value> {
        self.handoff.as_ref()
    }

    /// The messages stored when the lease was taken (or by this lease's
    /// last write).
    pub fn stored_messages(&self) -> Result<Vec<Arc<UiMessage>>, LeaseError> {
        Ok(self.stored.messages().to_vec())
    }

    /// What storing `messages` as the conversation takes (see
    /// [`StoredMessages::write_of`]).
    pub fn write_of(&self, messages: Vec<Arc<UiMessage>>) -> Result<PendingWrite, LeaseError> {
        self.stored
            .write_of(messages)
            .map_err(|err| LeaseError::Malformed(err.to_string()))
    }

    /// Stores `write` as the conversation.
    pub async fn save(&mut self, write: PendingWrite) -> Result<(), StoreError> {
        let head = conversations::save(
            &self.pool,
            &self.account,
            self.id.as_str(),
            self.holder,
            write.tail(),
        )
        .await?;
        self.stored = Arc::new(write.stored(head));
        Ok(())
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
                if let Err(err) =
                    conversations::renew(&pool, &account, id.as_str(), holder, lease).await
                {
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
    /// [`turn_end::store_and_release`]); the messages stay cached in
    /// `lifecycle` for the conversation's next turn. On an error the lease
    /// is still held.
    pub async fn store_and_release(
        &mut self,
        lifecycle: &Lifecycle,
        messages: Vec<Arc<UiMessage>>,
        stream_end: Option<&Append>,
    ) -> Result<TurnEnded, LeaseError> {
        let write = self.write_of(messages)?;
        let mut held = lifecycle.turn_connections().take().await?;
        let ended = turn_end::store_and_release(
            held.connection(),
            &self.account,
            self.id.as_str(),
            self.holder,
            write.tail(),
            stream_end,
        )
        .await;
        held.done(&ended);
        let ended = ended?;
        self.released = true;
        let cache = lifecycle.messages();
        match ended.stored {
            Some(head) => cache.put(
                &self.account,
                self.id.as_str(),
                Arc::new(write.stored(head)),
            ),
            None => cache.forget(&self.account, self.id.as_str()),
        }
        Ok(ended)
    }

    /// Lets the next turn in.
    pub async fn release(mut self) {
        self.released = true;
        if let Err(err) =
            conversations::end_turn(&self.pool, &self.account, self.id.as_str(), self.holder).await
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

/// A head for a write that goes with a take: negative, so unlike any head
/// Postgres draws, and random, so unlike any other taker's.
fn chosen_head() -> i64 {
    let (high, _) = Uuid::new_v4().as_u64_pair();
    -((high >> 1) as i64) - 1
}

/// A store error as a lease error.
fn lease_error(err: StoreError) -> LeaseError {
    match err {
        StoreError::Conflict { constraint } if constraint == conversations::BUSY => {
            LeaseError::Busy
        }
        StoreError::Conflict { constraint } if constraint == conversations::OTHER_AGENT => {
            LeaseError::OtherAgent
        }
        other => LeaseError::Store(other),
    }
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
                let _ = conversations::end_turn(&pool, &account, id.as_str(), holder).await;
            });
        }
    }
}
