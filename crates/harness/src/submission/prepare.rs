//! What every submitted turn does before it runs: check the agent again,
//! gather the policies its calls are judged by, choose its model, take the conversation, fit the request to it, check
//! its size and store it.

use std::sync::Arc;

use toolserver_domain::CallPath;
use toolserver_store::approvals;

use super::{Submission, SubmitError};
use crate::conversation::{prepare_turn, PrepareError};
use crate::handoff;
use crate::lifecycle::{ConversationLease, Lifecycle};
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
    pub history: Vec<UiMessage>,
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
    let lease = ConversationLease::take(lifecycle, &account, &conversation, agent).await?;
    let provider = match lease.handoff() {
        Some(_) => handoff::held_answer(&checked.config),
        None => provider,
    };
    let prepared = prepare_turn(
        lease.stored_messages()?,
        messages,
        trigger,
        format!("msg_{}", uuid::Uuid::now_v7().simple()),
    );
    let fitted = prepared
        .map_err(|err| match err {
            PrepareError::Invalid { field, message } => SubmitError::BadField { field, message },
            PrepareError::ApprovalMismatch(message) => SubmitError::ApprovalNotPending(message),
        })
        .and_then(|prepared| {
            let mut snapshot = prepared.history.clone();
            if !prepared.assistant.parts.is_empty() {
                snapshot.push(prepared.assistant.clone());
            }
            check_size(&snapshot, harness)?;
            Ok((prepared.history, prepared.assistant, snapshot))
        });
    match fitted {
        Ok((history, assistant, snapshot)) => {
            lease.save(&snapshot).await?;
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
fn check_size(messages: &[UiMessage], harness: &Harness) -> Result<(), SubmitError> {
    let settings = harness.settings();
    let max_messages = settings.max_conversation_messages;
    if messages.len() + 1 > max_messages {
        return Err(SubmitError::TooLarge(format!(
            "the conversation has {} messages; the limit is {max_messages}",
            messages.len()
        )));
    }
    let max_bytes = settings.max_conversation_bytes;
    let bytes = serde_json::to_vec(messages).map_or(usize::MAX, |v| v.len());
    if bytes > max_bytes {
        return Err(SubmitError::TooLarge(format!(
            "the conversation is {bytes} bytes of JSON; the limit is {max_bytes}"
        )));
    }
    Ok(())
}
