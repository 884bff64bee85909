//! A resume that waits for a detached turn's next run: between its runs a
//! detached turn has no active stream (it waits for its calls), and a
//! client subscribed to the conversation should see the continuation when
//! it starts, without polling.

use std::sync::Arc;

use tokio::sync::broadcast;
use tokio::time::Instant;
use toolserver_domain::AccountId;
use toolserver_store::{approvals, async_turns, turn_streams};

use super::{follow, Followed, Notice, StreamError, StreamHub};

/// Follows the conversation's active stream like [`follow`]; when none is
/// active but a detached turn on the conversation has not settled, or the
/// conversation waits on approvals (its turn resumes once they are
/// decided), waits for the next run's stream, until `deadline` (`None`: as long as the turn
/// stays unsettled). `None` when no stream came.
pub async fn follow_held(
    hub: &Arc<StreamHub>,
    account: &AccountId,
    conversation_id: &str,
    start_index: Option<i64>,
    deadline: Option<Instant>,
) -> Result<Option<Followed>, StreamError> {
    let key = turn_streams::conversation_key(account, conversation_id);
    let mut notices = hub.subscribe();
    loop {
        if let Some(followed) = follow(hub, account, conversation_id, start_index).await? {
            return Ok(Some(followed));
        }
        let waiting = async_turns::unsettled_on(hub.pool(), account, conversation_id).await?
            || approvals::waiting_on(hub.pool(), account, conversation_id).await?;
        if !waiting {
            return Ok(None);
        }
        if !wait_for_open(hub, &key, &mut notices, deadline).await {
            return Ok(None);
        }
    }
}

/// Waits until a stream opens on the conversation whose key is `key`, or
/// the periodic check is due; false once `deadline` passes.
async fn wait_for_open(
    hub: &StreamHub,
    key: &str,
    notices: &mut broadcast::Receiver<Notice>,
    deadline: Option<Instant>,
) -> bool {
    let check = Instant::now() + hub.settings().poll;
    let wake = deadline.map_or(check, |deadline| deadline.min(check));
    let sleep = tokio::time::sleep_until(wake);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return deadline.is_none_or(|deadline| Instant::now() < deadline),
            notice = notices.recv() => match notice {
                Ok(Notice::Opened(_, opened)) if *opened == *key => return true,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return true,
                Err(broadcast::error::RecvError::Closed) => {
                    sleep.as_mut().await;
                    return deadline.is_none_or(|deadline| Instant::now() < deadline);
                }
            },
        }
    }
}
