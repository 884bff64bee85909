//! What every turn request does before it runs, whether it streams
//! (`/chat`) or detaches (`/async`): check the agent again, take the
//! conversation, fit the request to it, check its size and store it.

use std::sync::Arc;

use toolserver_domain::AccountId;
use toolserver_harness::conversation::{prepare_turn, PrepareError, TurnTrigger};
use toolserver_harness::lifecycle::ConversationLease;
use toolserver_harness::provider::ModelProvider;
use toolserver_harness::turn::{DurableStatus, TurnPlan};
use toolserver_harness::ui::UiMessage;
use toolserver_harness::{CheckedAgent, HarnessSettings};
use toolserver_store::agents;

use super::chat_request::ChatRequest;
use super::{agent_not_found, checked_agent, parse_agent_id};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// A turn ready to run: its agent, model, conversation lease and messages.
pub struct StartedTurn {
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

impl StartedTurn {
    /// The plan to run this turn with, streaming to a person who can answer
    /// approvals.
    pub fn streaming_plan(
        &self,
        settings: &HarnessSettings,
        durable_status: Arc<dyn DurableStatus>,
    ) -> TurnPlan {
        TurnPlan {
            can_ask_approval: true,
            durable_status: Some(durable_status),
            ..TurnPlan::for_agent(
                &self.checked.config,
                settings,
                self.history.clone(),
                self.assistant.clone(),
            )
        }
    }
}

/// Refuses with a 4xx whatever can be refused, then stores the request's
/// message and holds the conversation.
pub async fn start_turn(
    state: &AppState,
    account: &AccountId,
    agent_id: &str,
    body: ChatRequest,
) -> ApiResult<StartedTurn> {
    let id = parse_agent_id(agent_id)?;
    let (conversation_id, sent, trigger) = body.parse()?;
    tracing::Span::current().record("conversation.id", conversation_id.as_str());
    let harness = state.harness();
    let record = agents::get(state.pool(), account, id)
        .await
        .map_err(agent_not_found)?;
    let checked = checked_agent(harness, account, &record).await?;
    let provider = harness.provider(&checked.config)?;
    let settings = harness.settings();
    let lease = ConversationLease::take(state.lifecycle(), account, &conversation_id, id).await?;
    match fit_request(&lease, sent, trigger, settings) {
        Ok((history, assistant, snapshot)) => {
            lease.save(&snapshot).await?;
            Ok(StartedTurn {
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

/// The request fitted to the stored conversation: the history, the
/// assistant message to build, and the snapshot to store now.
fn fit_request(
    lease: &ConversationLease,
    sent: Vec<UiMessage>,
    trigger: TurnTrigger,
    settings: &HarnessSettings,
) -> ApiResult<(Vec<UiMessage>, UiMessage, Vec<UiMessage>)> {
    let prepared = prepare_turn(
        lease.stored_messages()?,
        sent,
        trigger,
        format!("msg_{}", uuid::Uuid::now_v7().simple()),
    )
    .map_err(|err| match err {
        PrepareError::Invalid { field, message } => ApiError::bad_field(&field, message),
        PrepareError::ApprovalMismatch(message) => ApiError::Conflict {
            code: "approval_not_pending",
            message,
        },
    })?;
    let mut snapshot = prepared.history.clone();
    if !prepared.assistant.parts.is_empty() {
        snapshot.push(prepared.assistant.clone());
    }
    check_size(
        &snapshot,
        settings.max_conversation_messages,
        settings.max_conversation_bytes,
    )?;
    Ok((prepared.history, prepared.assistant, snapshot))
}

fn check_size(messages: &[UiMessage], max_messages: usize, max_bytes: usize) -> ApiResult<()> {
    // The new assistant message counts too.
    if messages.len() + 1 > max_messages {
        return Err(ApiError::PayloadTooLarge(format!(
            "the conversation has {} messages; the limit is {max_messages}",
            messages.len()
        )));
    }
    let bytes = serde_json::to_vec(messages).map_or(usize::MAX, |v| v.len());
    if bytes > max_bytes {
        return Err(ApiError::PayloadTooLarge(format!(
            "the conversation is {bytes} bytes of JSON; the limit is {max_bytes}"
        )));
    }
    Ok(())
}
