//! Starting the turns of recorded channel events: the request that records
//! an event starts it at once; events it could not start (the conversation
//! was busy, the account at its limit, the process died) are claimed again
//! by every process's inbox loop, with a backoff, until they start or are
//! given up, in which case the channel is told why.

use std::time::Duration;

use serde_json::json;
use toolserver_domain::{AccountId, AgentId, ConversationId};
use toolserver_harness::channels::failure_reply;
use toolserver_harness::conversation::TurnTrigger;
use toolserver_harness::lifecycle::{DetachedReply, LifecycleError};
use toolserver_harness::submission::{Submission, SubmitError};
use toolserver_harness::ui::UiMessage;
use toolserver_store::channel_events::{self, ChannelEvent};
use toolserver_store::StoreError;

use crate::admission::AdmissionError;
use crate::state::AppState;

/// Events claimed per pass at most.
const BATCH: i64 = 16;

/// How long a claim on an event lasts: its start is one submission.
pub const CLAIM: Duration = Duration::from_secs(30);

/// What became of one attempt to start an event.
enum Start {
    /// Its turn runs (or had been started already).
    Started,
    /// Not now: try again later.
    Later(String, Option<Duration>),
    /// Never: give it up.
    Never(String),
}

/// Starts `event`'s turn, or records why not.
pub async fn start_event(state: &AppState, event: ChannelEvent) {
    let outcome = attempt(state, &event).await;
    let pool = state.pool();
    let recorded = match outcome {
        Start::Started => Ok(()),
        Start::Later(reason, wait) => {
            let attempts = u32::try_from(event.attempts).unwrap_or(u32::MAX);
            let settings = state.harness().settings().webhooks;
            match wait.or_else(|| settings.retry_after(attempts)) {
                Some(wait) => channel_events::postpone(pool, event.id, wait, &reason).await,
                None => give_up(state, &event, &reason).await,
            }
        }
        Start::Never(reason) => give_up(state, &event, &reason).await,
    };
    if let Err(err) = recorded {
        tracing::warn!(error = %err, event.id = %event.id, "could not record a channel event's start");
    }
}

async fn give_up(state: &AppState, event: &ChannelEvent, reason: &str) -> Result<(), StoreError> {
    tracing::info!(event.id = %event.id, reason, "channel event given up");
    let notice = failure_reply(event, reason);
    channel_events::give_up(state.pool(), event, reason, Some(&notice)).await
}

async fn attempt(state: &AppState, event: &ChannelEvent) -> Start {
    let Ok(account) = AccountId::parse(&event.account_id) else {
        return Start::Never("the event's account does not read".to_owned());
    };
    match state.admission().detached_turn(&account).await {
        Ok(()) => {}
        Err(AdmissionError::Refused(refusal)) => {
            return Start::Later(refusal.to_string(), Some(refusal.retry_after))
        }
        Err(err) => return Start::Later(err.to_string(), None),
    }
    let message: UiMessage = match serde_json::from_value(event.message.clone()) {
        Ok(message) => message,
        Err(err) => return Start::Never(format!("the recorded message does not read: {err}")),
    };
    let submission = Submission {
        account,
        agent: AgentId::from_uuid(event.agent_id),
        conversation: ConversationId::from_stored(event.conversation_id.clone()),
        messages: vec![message],
        trigger: TurnTrigger::Submit,
        subject: None,
    };
    let submitted = state
        .lifecycle()
        .submit_detached(submission, DetachedReply::Channel(event.id))
        .await;
    match submitted {
        Ok(turn_id) => {
            tracing::info!(event.id = %event.id, turn.id = %turn_id, "channel turn started");
            Start::Started
        }
        Err(SubmitError::Lifecycle(LifecycleError::Store(StoreError::Conflict { .. }))) => {
            Start::Started
        }
        Err(err) if permanent(&err) => Start::Never(err.to_string()),
        Err(err) => Start::Later(err.to_string(), None),
    }
}

/// Whether waiting cannot help a refused submission.
fn permanent(err: &SubmitError) -> bool {
    match err {
        SubmitError::Agent(_)
        | SubmitError::Invalid(_)
        | SubmitError::BadField { .. }
        | SubmitError::ApprovalNotPending(_)
        | SubmitError::TooLarge(_) => true,
        SubmitError::Lease(lease) => lease.is_permanent(),
        SubmitError::Store(_) | SubmitError::Stream(_) | SubmitError::Lifecycle(_) => false,
    }
}

/// Claims events not started and starts them, until the server stops (the
/// loop runs on the lifecycle's task tracker).
pub fn spawn_inbox(state: AppState) -> tokio::task::JoinHandle<()> {
    let lifecycle = state.lifecycle().clone();
    lifecycle.spawn_loop(async move {
        let poll = state.harness().settings().webhooks.poll;
        loop {
            match channel_events::claim_unstarted(state.pool(), BATCH, CLAIM).await {
                Ok(events) => {
                    let full = events.len() as i64 == BATCH;
                    for event in events {
                        start_event(&state, event).await;
                    }
                    if full {
                        continue;
                    }
                }
                Err(err) => tracing::warn!(error = %err, "could not claim channel events"),
            }
            tokio::time::sleep(poll).await;
        }
    })
}

/// The user message of a channel event with id `event_id`.
pub fn user_message(event_id: uuid::Uuid, text: &str, channel: &str) -> serde_json::Value {
    json!({
        "id": format!("msg_{}", event_id.simple()),
        "role": "user",
        "parts": [{"type": "text", "text": text}],
        "metadata": {"channel": channel},
    })
}
