//! What a channel is told after each pass of its turn: the pass's text,
//! a visible line for each call that needed an approval the channel cannot
//! give, and the error that ended the turn, if any. Recorded as an outbox
//! post with the pass's commit, so it is posted once the pass is stored
//! and never lost to a crash in between.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolserver_store::channel_events::ChannelEvent;
use toolserver_store::webhook_deliveries::NewDelivery;
use uuid::Uuid;

use crate::turn::APPROVAL_UNAVAILABLE;
use crate::ui::{ToolState, UiPart};

/// The `kind` of a channel's answer among the outbox's posts.
pub const CHANNEL_REPLY: &str = "channel";

/// A channel's answer, as its outbox post holds it: the platform request
/// is built (and signed) at each attempt from the agent's current channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelReply {
    /// The agent.
    pub agent_id: Uuid,
    /// The channel's name.
    pub channel: String,
    /// Where in the platform (its thread or chat).
    pub reply_to: Value,
    /// What to say.
    pub text: String,
}

/// The answer of one pass of `event`'s turn (`parts`: what the pass added
/// to the assistant message; `error`: why the turn failed, if it did);
/// `None` when the pass said nothing.
pub fn reply_for_pass(
    event: &ChannelEvent,
    parts: &[UiPart],
    error: Option<&str>,
) -> Option<NewDelivery> {
    let mut lines: Vec<String> = Vec::new();
    for part in parts {
        match part {
            UiPart::Text { text, .. } if !text.trim().is_empty() => {
                lines.push(text.trim().to_owned())
            }
            UiPart::Tool(tool)
                if tool.state == ToolState::OutputError
                    && tool
                        .error_text
                        .as_deref()
                        .is_some_and(|text| text.ends_with(APPROVAL_UNAVAILABLE)) =>
            {
                lines.push(format!(
                    "⚠️ {} needs a person's approval, which cannot be given from this channel yet; it was not run.",
                    tool.tool_name
                ));
            }
            UiPart::Other(data) if data["type"] == "data-authorization" => {
                let data = &data["data"];
                if let (Some(provider), Some(url)) =
                    (data["provider"].as_str(), data["url"].as_str())
                {
                    lines.push(format!(
                        "🔗 This needs your {provider} account. Connect it here, then ask again: {url}"
                    ));
                }
            }
            _ => {}
        }
    }
    if let Some(error) = error {
        lines.push(format!(
            "⚠️ This message could not be fully answered: {error}"
        ));
    }
    (!lines.is_empty()).then(|| delivery(event, lines.join("\n\n")))
}

/// The answer to `event` when its turn could not start at all.
pub fn failure_reply(event: &ChannelEvent, reason: &str) -> NewDelivery {
    delivery(
        event,
        format!("⚠️ This message could not be answered: {reason}"),
    )
}

fn delivery(event: &ChannelEvent, text: String) -> NewDelivery {
    let reply = ChannelReply {
        agent_id: event.agent_id,
        channel: event.channel.clone(),
        reply_to: event.reply_to.clone(),
        text,
    };
    NewDelivery {
        id: Uuid::now_v7(),
        kind: CHANNEL_REPLY,
        url: format!("channel:{}/{}", event.agent_id, event.channel),
        body: serde_json::to_value(&reply).unwrap_or_default(),
    }
}
