//! Recovering a conversation whose turn's server process died: the turn is
//! stored as far as its stream was recorded, marked interrupted (see
//! [`crate::ui::with_interrupted_turn`]), its stream ended, and the
//! conversation freed, in that order, fenced by the dead holder's id so
//! that of two recoverers (or a holder that was only paused) one writes.
//! A taker recovers before it takes ([`super::ConversationLease::take_as`]);
//! the reaper recovers what no taker came for, so the stored conversation
//! matches what clients were shown within seconds of the death.

use toolserver_domain::AccountId;
use toolserver_store::conversations::{self, AbandonedTurn};
use toolserver_store::StoreError;

use super::{LeaseError, Lifecycle};
use crate::stream::abandoned_turn_chunks;
use crate::ui::with_interrupted_turn;

impl Lifecycle {
    /// Stores `abandoned`'s turn as interrupted and frees `account`'s
    /// conversation `conversation_id`.
    pub(super) async fn recover(
        &self,
        account: &AccountId,
        conversation_id: &str,
        abandoned: AbandonedTurn,
    ) -> Result<(), LeaseError> {
        let chunks =
            abandoned_turn_chunks(self.streams(), account, conversation_id, abandoned.taken_at)
                .await?;
        let recovered =
            conversations::recover(self.pool(), account, conversation_id, abandoned, |stored| {
                with_interrupted_turn(stored, &chunks)
            })
            .await?;
        if recovered {
            tracing::info!(
                conversation.id = %conversation_id,
                holder = %abandoned.holder,
                chunks = chunks.len(),
                "stored the interrupted turn of a server that stopped and freed its conversation"
            );
        }
        Ok(())
    }

    /// Recovers up to `limit` conversations held by turns of processes that
    /// died; returns how many it freed.
    pub(super) async fn recover_dead_holders(&self, limit: i64) -> Result<u64, StoreError> {
        let held = conversations::held_by_the_dead(self.pool(), limit).await?;
        let mut recovered = 0;
        for conversation in held {
            let account = match AccountId::parse(&conversation.account_id) {
                Ok(account) => account,
                Err(err) => {
                    tracing::warn!(error = %err, "a conversation of a malformed account id");
                    continue;
                }
            };
            match self
                .recover(&account, &conversation.id, conversation.abandoned())
                .await
            {
                Ok(()) => recovered += 1,
                Err(err) => {
                    tracing::warn!(error = %err, conversation.id = %conversation.id, "could not recover a conversation of a server that stopped");
                }
            }
        }
        Ok(recovered)
    }
}
