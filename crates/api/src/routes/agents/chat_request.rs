//! The body `useChat` sends: `{ id, messages, trigger, messageId? }`. Other
//! top-level fields (custom `body` options of the client) are ignored.

use serde::Deserialize;
use serde_json::Value;
use toolserver_harness::conversation::TurnTrigger;
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
    /// Checks the conversation id and parses the messages, naming the first bad one.
    pub fn parse(self) -> Result<(String, Vec<UiMessage>, TurnTrigger), ApiError> {
        check_conversation_id("id", &self.id)?;
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
        Ok((self.id, messages, trigger))
    }
}

/// Refuses a conversation id that is not 1-200 characters or holds a NUL,
/// naming `field` (the body's `id`, or the path's `conversationId`).
pub fn check_conversation_id(field: &str, id: &str) -> Result<(), ApiError> {
    let length = id.chars().count();
    if !(1..=200).contains(&length) {
        return Err(ApiError::bad_field(field, "must be 1-200 characters"));
    }
    toolserver_domain::refuse_nul_text(field, id)?;
    Ok(())
}
