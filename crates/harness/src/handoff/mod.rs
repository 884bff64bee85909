//! Handing a conversation to people: the `handoff` tool records the handoff
//! on the conversation and announces it on the agent's webhook; while it
//! lasts, turns of the conversation are answered with the agent's held
//! message instead of the model, until a person releases it.

mod held;
mod tool;

use std::sync::Arc;

use serde_json::{json, Value};
use toolserver_domain::agent::{AgentConfig, BuiltinTool, ToolKey};
use toolserver_domain::{AccountId, AgentId, ConversationId};
use url::Url;

pub use held::HeldAnswer;
pub use tool::HandoffTool;

use crate::provider::ModelProvider;

/// The answer to turns while a conversation is with people, when the agent
/// sets no `heldMessage`.
pub const DEFAULT_HELD_MESSAGE: &str =
    "A person has taken over this conversation and will answer here.";

/// The conversation a turn runs in: what tools acting on it need.
#[derive(Debug, Clone)]
pub struct TurnScope {
    /// The account.
    pub account: AccountId,
    /// The agent.
    pub agent: AgentId,
    /// The conversation.
    pub conversation: ConversationId,
    /// The server's public URL, under which announcements link to the
    /// conversation.
    pub public_url: Url,
    /// The end user the turn acts for (`None`: the account itself).
    pub user: Option<String>,
}

/// The `handoff` tool's options from an agent config (checked when the
/// config was parsed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandoffOptions {
    /// Where the announcement is posted.
    pub webhook_url: Option<Url>,
    /// The answer to turns while the conversation is with people.
    pub held_message: Option<String>,
    /// Names the announcement pings.
    pub staff: Vec<String>,
}

impl HandoffOptions {
    /// The options of `config`'s `handoff` tool, if it configures one
    /// (enabled or not: a held conversation keeps its message).
    pub fn of(config: &AgentConfig) -> Option<Self> {
        let setting = config.tools.get(&ToolKey::Builtin(BuiltinTool::Handoff))?;
        let options = &setting.options;
        Some(Self {
            webhook_url: options
                .get("webhookUrl")
                .and_then(Value::as_str)
                .and_then(|url| Url::parse(url).ok()),
            held_message: options
                .get("heldMessage")
                .and_then(Value::as_str)
                .map(str::to_owned),
            staff: options
                .get("staff")
                .and_then(Value::as_array)
                .map(|names| {
                    names
                        .iter()
                        .filter_map(|name| Some(name.as_str()?.to_owned()))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The held answer of an agent with these options.
    pub fn held_message(options: Option<&Self>) -> &str {
        options
            .and_then(|options| options.held_message.as_deref())
            .unwrap_or(DEFAULT_HELD_MESSAGE)
    }
}

/// The model of a turn of a conversation that is with people: `config`'s
/// held message.
pub fn held_answer(config: &AgentConfig) -> Arc<dyn ModelProvider> {
    let options = HandoffOptions::of(config);
    Arc::new(HeldAnswer::new(HandoffOptions::held_message(
        options.as_ref(),
    )))
}

/// The model-facing description of `handoff`.
pub const DESCRIPTION: &str = "Hand this conversation to a person when you cannot or should not \
     go on yourself (the user asks for a person, a decision needs a human, or you are stuck). \
     Give the reason, and a summary the person can act on. After the call, tell the user a \
     person will follow up; later messages go to people until they hand the conversation back.";

/// The input schema of `handoff`.
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "reason": {
                "type": "string", "minLength": 1, "maxLength": 1000,
                "description": "Why a person is needed.",
            },
            "summary": {
                "type": "string", "maxLength": 4000,
                "description": "What the person should know to take over.",
            },
        },
        "required": ["reason"],
        "additionalProperties": false,
    })
}
