//! What every submitted turn does before it runs: check the agent again,
//! gather the policies its calls are judged by, choose its model, take the conversation, fit the request to it, check
//! its size and store it.

use std::sync::Arc;

use toolserver_domain::CallPath;
use toolserver_store::approvals;

use super::{Submission, SubmitError};
use crate::conversation::{prepare_turn, PrepareError, TurnTrigger};
use crate::handoff;
use crate::lifecycle::{ConversationLease, LeaseError, Lifecycle, PendingWrite, StoredMessages};
use crate::policy::{CallGate, Narrowing};
use crate::provider::ModelProvider;
use crate::ui::{ToolState, UiMessage};
use crate::{CheckedAgent, Harness};

/// A turn ready to run: its agent, model, conversation lease and messages.
pub(super) struct PreparedTurn {
    /// The agent, checked again.
    pub checked: CheckedAgent,
    /// The agent's model.
    pub provider: Arc<dyn ModelProvider>,
    /// The conversation, held for this turn.
    pub lease: ConversationLease,
    /// Messages before the assistant message.
    pub history: Vec<Arc<UiMessage>>,
    /// The assistant message to build.
    pub assistant: UiMessage,
}

/// Refuses whatever can be refused, then stores the request's message and
/// holds the conversation.
pub(super) async fn prepare(
    lifecycle: &Lifecycle,
    submission: Submission,
) -> Result<PreparedTurn, SubmitError> {
    let Submission {
        account,
        agent,
        conversation,
        messages,
        trigger,
        subject,
    } = submission;
    let harness = lifecycle.harness();
    let mut checked = harness
        .load_agent(lifecycle.pool(), &account, agent)
        .await?;
    let narrowing = Narrowing {
        user: subject.as_deref(),
        conversation: Some(conversation.as_str()),
    };
    let stack = harness
        .policy_stack(&account, Some(&checked.config), narrowing)
        .await?;
    let gate = CallGate::new(stack, subject, CallPath::Turn)
        .in_turn(agent.to_string(), Some(conversation.to_string()));
    checked.registry = checked.registry.with_gate(gate);
    let provider = harness.provider(&checked.config)?;
    // Prepared first against the messages this process has of the
    // conversation (none if it has not seen it), so the take stores the
    // request's message in the same statement while they are still the
    // stored ones; prepared again against the stored messages otherwise.
    let message_id = format!("msg_{}", uuid::Uuid::now_v7().simple());
    let assumed = lifecycle
        .messages()
        .get(&account, conversation.as_str())
        .unwrap_or_else(|| Arc::new(StoredMessages::none()));
    let early = fit(
        assumed.messages().to_vec(),
        &messages,
        &trigger,
        &message_id,
        |snapshot| {
            assumed
                .write_of(snapshot)
                .map_err(|err| LeaseError::Malformed(err.to_string()))
        },
        harness,
    );
    let (mut lease, early) = match early {
        Ok((history, assistant, write)) => {
            let (lease, wrote) = ConversationLease::take_writing(
                lifecycle,
                &account,
                &conversation,
                agent,
                &assumed,
                write,
            )
            .await?;
            (lease, wrote.then_some((history, assistant)))
        }
        Err(_) => (
            ConversationLease::take(lifecycle, &account, &conversation, agent).await?,
            None,
        ),
    };
    let provider = match lease.handoff() {
        Some(_) => handoff::held_answer(&checked.config),
        None => provider,
    };
    let fitted = match early {
        Some(fitted) => Ok(fitted),
        None => refit(&mut lease, &messages, &trigger, &message_id, harness).await,
    };
    match fitted {
        Ok((history, assistant)) => {
            let decisions = decisions_in(&assistant);
            if !decisions.is_empty() {
                approvals::settle_from_chat(lifecycle.pool(), &account, &decisions).await?;
            }
            Ok(PreparedTurn {
                checked,
                provider,
                lease,
                history,
                assistant,
            })
        }
        Err(refused) => {
            // Released at once, so a refused first request leaves no
            // conversation behind by the time it is answered.
            lease.release().await;
            Err(refused)
        }
    }
}

/// Fits the request to the messages `lease` found stored and stores the
/// conversation it makes: the path of a take that could not store the
/// request's message with it.
async fn refit(
    lease: &mut ConversationLease,
    sent: &[UiMessage],
    trigger: &TurnTrigger,
    message_id: &str,
    harness: &Harness,
) -> Result<(Vec<Arc<UiMessage>>, UiMessage), SubmitError> {
    let stored = lease.stored_messages()?;
    let (history, assistant, write) = fit(
        stored,
        sent,
        trigger,
        message_id,
        |snapshot| lease.write_of(snapshot),
        harness,
    )?;
    lease.save(write).await?;
    Ok((history, assistant))
}

/// Fits the request (`sent`, `trigger`) to `stored` and prepares the write
/// of the conversation it makes (with `write_of`), refusing a request that
/// does not fit or a conversation past its size limits.
fn fit(
    stored: Vec<Arc<UiMessage>>,
    sent: &[UiMessage],
    trigger: &TurnTrigger,
    message_id: &str,
    write_of: impl FnOnce(Vec<Arc<UiMessage>>) -> Result<PendingWrite, LeaseError>,
    harness: &Harness,
) -> Result<(Vec<Arc<UiMessage>>, UiMessage, PendingWrite), SubmitError> {
    let prepared = prepare_turn(
        stored,
        sent.to_vec(),
        trigger.clone(),
        message_id.to_owned(),
    )
    .map_err(|err| match err {
        PrepareError::Invalid { field, message } => SubmitError::BadField { field, message },
        PrepareError::ApprovalMismatch(message) => SubmitError::ApprovalNotPending(message),
    })?;
    let mut snapshot = prepared.history.clone();
    if !prepared.assistant.parts.is_empty() {
        snapshot.push(Arc::new(prepared.assistant.clone()));
    }
    let write = write_of(snapshot)?;
    check_size(&write, harness)?;
    Ok((prepared.history, prepared.assistant, write))
}

/// The approval decisions `assistant` carries (`(id, approved, reason)`),
/// which its turn acts on.
fn decisions_in(assistant: &UiMessage) -> Vec<(String, bool, Option<String>)> {
    assistant
        .tool_parts()
        .filter(|part| part.state == ToolState::ApprovalResponded)
        .filter_map(|part| {
            let approval = part.approval.as_ref()?;
            Some((
                approval.id.clone(),
                approval.approved?,
                approval.reason.clone(),
            ))
        })
        .collect()
}

/// Refuses a conversation past the message or byte limit (the new
/// assistant message counts too).
fn check_size(write: &PendingWrite, harness: &Harness) -> Result<(), SubmitError> {
    let settings = harness.settings();
    let max_messages = settings.max_conversation_messages;
    if write.len() + 1 > max_messages {
        return Err(SubmitError::TooLarge(format!(
            "the conversation has {} messages; the limit is {max_messages}",
            write.len()
        )));
    }
    let max_bytes = settings.max_conversation_bytes;
    let bytes = write.json_size();
    if bytes > max_bytes {
        return Err(SubmitError::TooLarge(format!(
            "the conversation is {bytes} bytes of JSON; the limit is {max_bytes}"
        )));
    }
    Ok(())
}
