//! The body `useChat` sends: `{ id, messages, trigger, messageId? }`. Other
//! top-level fields (custom `body` options of the client) are ignored.

use serde::Deserialize;
use serde_json::Value;
use toolserver_domain::{AccountId, AgentId, ConversationId};
use toolserver_harness::conversation::TurnTrigger;
use toolserver_harness::submission::Submission;
use toolserver_harness::ui::UiMessage;
use utoipa::ToSchema;

use crate::error::ApiError;

/// Why the client asks for a turn.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// A new user message, or approval decisions.
    SubmitMessage,
    /// Answer the last user message again.
    RegenerateMessage,
}

/// A turn request, as the AI SDK's `useChat` sends it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatRequest {
    /// The conversation id (chosen by the client, 1-200 characters).
    pub id: String,
    /// The conversation's UI messages; the last one is the new input.
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    /// `submit-message` or `regenerate-message`.
    pub trigger: Trigger,
    /// With `regenerate-message`: the assistant message to replace.
    pub message_id: Option<String>,
}

impl ChatRequest {
    /// The turn this request asks `agent_id` for on behalf of `account`:
    /// checks the conversation id and parses the messages, naming the
    /// first bad one; an agent id that does not parse is simply not found.
    pub fn into_submission(
        self,
        account: AccountId,
        agent_id: &str,
    ) -> Result<Submission, ApiError> {
        let agent = AgentId::parse(agent_id).ok_or(ApiError::NotFound("agent"))?;
        let conversation = ConversationId::parse("id", &self.id)?;
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(index, message)| {
                serde_json::from_value(message).map_err(|err| {
                    ApiError::bad_field(
                        &format!("messages[{index}]"),
                        format!("not a UI message: {err}"),
                    )
                })
            })
            .collect::<Result<Vec<UiMessage>, _>>()?;
        let trigger = match self.trigger {
            Trigger::SubmitMessage => TurnTrigger::Submit,
            Trigger::RegenerateMessage => TurnTrigger::Regenerate {
                message_id: self.message_id,
            },
        };
        Ok(Submission {
            account,
            agent,
            conversation,
            messages,
            trigger,
            subject: None,
        })
    }
}
