//! A turn streamed to the request that asked for it. Its chunks are
//! recorded (see [`crate::stream`]) before the request carries them, so a
//! resume elsewhere replays exactly what this client saw. The conversation
//! is stored and freed before the last chunk arrives, so a client that sees
//! the end can continue at once. Whether a client leaving stops the turn is
//! the agent's `onDisconnect`.

use std::sync::Arc;

use tokio::sync::mpsc;
use toolserver_domain::{AccountId, CallPath};
use toolserver_store::turn_streams::{Append, Appended};
use tracing::Instrument;

use super::prepare::PreparedTurn;
use super::SubmitError;
use crate::approvals::AskedScope;
use crate::handoff::TurnScope;
use crate::ledger::{CallScope, TurnLedger};
use crate::lifecycle::{AccountStatus, ConversationLease, Lifecycle};
use crate::stream::{self, Opens};
use crate::turn::{run_turn, TurnPlan};
use crate::ui::UiMessage;

/// Chunks buffered for the requesting client.
const FORWARD_BUFFER: usize = 64;

/// Opens the turn's stream and runs the turn in its own task, which keeps
/// `hold` until the turn has ended; the chunks arrive on the returned
/// channel.
pub(super) async fn launch(
    lifecycle: &Lifecycle,
    (account, subject): (&AccountId, Option<String>),
    turn: PreparedTurn,
    hold: Box<dyn Send>,
) -> Result<mpsc::Receiver<String>, SubmitError> {
    let settings = lifecycle.harness().settings();
    let durable = AccountStatus::shared(
        lifecycle.pool().clone(),
        lifecycle.executor().clone(),
        account.clone(),
    );
    let mut plan = TurnPlan {
        can_ask_approval: true,
        durable_status: Some(durable),
        ..TurnPlan::for_agent(&turn.checked.config, settings, turn.history, turn.assistant)
    };
    plan.ledger = Some(TurnLedger {
        ledger: lifecycle.ledger().clone(),
        scope: CallScope {
            agent: Some(turn.lease.agent().as_uuid()),
            conversation: Some(turn.lease.conversation_id().to_string()),
            turn: Some(plan.assistant.id.clone()),
            subject: subject.clone(),
            ..CallScope::direct(account.clone(), CallPath::Turn)
        },
    });
    plan.authorizer = Some(lifecycle.authorizer(
        account,
        (
            turn.lease.agent().as_uuid(),
            turn.lease.conversation_id().as_str(),
        ),
        subject.clone(),
    ));
    let on_disconnect = turn.checked.config.on_disconnect;
    let asking = AskedScope {
        account: account.clone(),
        agent: turn.lease.agent().as_uuid(),
        conversation: turn.lease.conversation_id().to_string(),
        message: plan.assistant.id.clone(),
        subject,
    };
    let recorder = lifecycle.clone();
    let scope = TurnScope {
        account: account.clone(),
        agent: turn.lease.agent(),
        conversation: turn.lease.conversation_id().clone(),
        public_url: settings.public_url.clone(),
        user: asking.subject.clone(),
    };
    let (lease, provider, registry) = (
        turn.lease,
        turn.provider,
        turn.checked
            .registry
            .in_scope(lifecycle.harness().sources(), scope)
            .await,
    );
    let (forward, client) = mpsc::channel(FORWARD_BUFFER);
    let recording = match stream::record(
        lifecycle.streams(),
        account,
        lease.conversation_id().as_str(),
        Some(forward.clone()),
        on_disconnect,
        Opens::WithFirstChunks(lease.holder()),
    )
    .await
    {
        Ok(recording) => recording,
        Err(err) => {
            lease.release().await;
            return Err(err.into());
        }
    };
    plan.stop = recording.stop.clone();
    let span = tracing::info_span!(
        "turn",
        agent.id = %lease.agent(),
        conversation.id = %lease.conversation_id(),
        stream.id = ?recording.stream_id,
    );
    let turn = async move {
        let renewal = lease.keep_renewed();
        let outcome = run_turn(provider, registry, plan, recording.chunks.clone()).await;
        renewal.abort();
        // Recorded before the conversation, so a client that sees the turn
        // end finds its approvals (one left behind by a death in between
        // is refused when decided: the conversation never asked).
        if let Err(err) = recorder.record_asked(&asking, &outcome.asked).await {
            tracing::error!(error = %err, "could not record the turn's approvals");
        }
        let mut messages = outcome.history;
        messages.push(Arc::new(outcome.assistant));
        recording
            .finish_with(|stream_end| store_and_release(&recorder, lease, messages, stream_end))
            .await;
        drop(forward);
        drop(hold);
    };
    tokio::spawn(turn.instrument(span));
    Ok(client)
}

/// A turn's last write: its conversation stored and released, with its
/// stream's end when the recording gives it; how that end went.
async fn store_and_release(
    lifecycle: &Lifecycle,
    mut lease: ConversationLease,
    messages: Vec<Arc<UiMessage>>,
    stream_end: Option<Append>,
) -> Option<Appended> {
    match lease
        .store_and_release(lifecycle, messages, stream_end.as_ref())
        .await
    {
        Ok(ended) => {
            if ended.stored.is_none() {
                tracing::error!("could not store the conversation: the turn no longer holds it");
            }
            ended.stream_end
        }
        Err(err) => {
            tracing::error!(error = %err, "could not store the conversation");
            lease.release().await;
            None
        }
    }
}
