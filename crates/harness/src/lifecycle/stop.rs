//! Stopping a conversation's running turn from any process: its stream is
//! asked to stop (its recorder, wherever it runs, ends the turn); a turn
//! that has not recorded a chunk yet hears the stop under its lease
//! holder's id, which its stream will open under; a turn whose server died
//! is recovered here and now (stored as interrupted, conversation freed).

use toolserver_domain::AccountId;
use toolserver_store::conversations::{self, Holder};
use toolserver_store::turn_streams;
use uuid::Uuid;

use super::{Lifecycle, LifecycleError};

impl Lifecycle {
    /// Stops `account`'s conversation `conversation_id`'s running turn;
    /// returns its stream's id, or `None` when no turn runs there.
    pub async fn stop_turn(
        &self,
        account: &AccountId,
        conversation_id: &str,
    ) -> Result<Option<Uuid>, LifecycleError> {
        let pool = self.pool();
        let holder = conversations::holder(pool, account, conversation_id).await?;
        if let Holder::Abandoned(abandoned) = holder {
            self.recover(account, conversation_id, abandoned).await?;
            return Ok(Some(abandoned.holder));
        }
        if let Some(stream) = turn_streams::request_stop(pool, account, conversation_id).await? {
            return Ok(Some(stream));
        }
        let recording = self.0.harness.settings().streams.record;
        match holder {
            // With recording off no recorder listens: nothing to stop from here.
            Holder::Live(holder) if recording => {
                turn_streams::announce_stop(pool, holder).await?;
                Ok(Some(holder))
            }
            Holder::Live(_) | Holder::Nobody | Holder::Abandoned(_) => Ok(None),
        }
    }
}
