//! The `handoff` tool: stores the handoff on the conversation and, when the
//! agent names a webhook, its announcement, in one transaction; the
//! announcement is then posted (and retried) by the webhook deliverer.

use std::sync::Arc;

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use sqlx::PgPool;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_store::handoffs::{self, ANNOUNCEMENT};
use toolserver_store::webhook_deliveries::NewDelivery;
use uuid::Uuid;

use super::{HandoffOptions, TurnScope};
use crate::tools::{Failure, Invocation, ToolEvent, ToolEvents, ToolImpl};

/// What the model is told after handing off.
const TOLD: &str = "The conversation is now with people. Tell the user a person will follow \
                    up here; their next messages go to people until the conversation is \
                    handed back.";

/// The `handoff` tool of one agent; it acts once it knows its turn's
/// conversation ([`Self::in_scope`]).
#[derive(Clone)]
pub struct HandoffTool {
    pool: PgPool,
    options: Arc<HandoffOptions>,
    scope: Option<Arc<TurnScope>>,
}

impl HandoffTool {
    /// The tool of an agent with `options`.
    pub fn new(pool: PgPool, options: HandoffOptions) -> Self {
        Self {
            pool,
            options: Arc::new(options),
            scope: None,
        }
    }

    /// The same tool, acting on the conversation of `scope`.
    pub fn in_scope(&self, scope: TurnScope) -> Self {
        Self {
            scope: Some(Arc::new(scope)),
            ..self.clone()
        }
    }

    async fn hand_off(&self, invocation: Invocation) -> Result<Value, String> {
        let scope = self
            .scope
            .as_deref()
            .ok_or("handoff works only in a turn of a conversation")?;
        let text = |field: &str| invocation.input.get(field).and_then(Value::as_str);
        let reason = text("reason").unwrap_or_default();
        let summary = text("summary");
        let at = OffsetDateTime::now_utc()
            .format(&Rfc3339)
            .map_err(|err| err.to_string())?;
        let handoff = json!({
            "reason": reason,
            "summary": summary,
            "toolCallId": invocation.tool_call_id,
            "at": at,
        });
        let announcement = self.options.webhook_url.as_ref().map(|url| {
            let id = Uuid::now_v7();
            NewDelivery {
                id,
                kind: ANNOUNCEMENT,
                url: url.to_string(),
                body: json!({
                    "type": "conversation.handoff",
                    "text": announcement_text(scope, reason, summary, &self.options.staff),
                    "deliveryId": id,
                    "agentId": scope.agent.to_string(),
                    "conversationId": scope.conversation.as_str(),
                    "reason": reason,
                    "summary": summary,
                    "staff": self.options.staff,
                    "link": link(scope, &[]),
                    "releaseUrl": link(scope, &["release"]),
                    "at": at,
                }),
            }
        });
        handoffs::hand_off(
            &self.pool,
            &scope.account,
            scope.conversation.as_str(),
            &handoff,
            announcement.as_ref(),
        )
        .await
        .map_err(|err| format!("the handoff could not be stored: {err}"))?;
        Ok(json!({
            "handedOff": true,
            "announced": announcement.is_some(),
            "instructions": TOLD,
        }))
    }
}

/// The announcement as one line of chat text, so that a chat's incoming
/// webhook (Slack, Mattermost, Google Chat: they post a body's `text`)
/// can be the `webhookUrl` and announce the handoff in a channel.
fn announcement_text(
    scope: &TurnScope,
    reason: &str,
    summary: Option<&str>,
    staff: &[String],
) -> String {
    let mut text = format!(
        "Conversation {} was handed to people: {reason}.",
        scope.conversation.as_str()
    );
    if let Some(summary) = summary.filter(|summary| !summary.trim().is_empty()) {
        text.push_str(&format!(" Summary: {summary}."));
    }
    if !staff.is_empty() {
        text.push_str(&format!(" For: {}.", staff.join(", ")));
    }
    text.push_str(&format!(" {}", link(scope, &[])));
    text
}

/// `{public_url}/conversations/{id}/{tail…}`.
fn link(scope: &TurnScope, tail: &[&str]) -> String {
    let mut url = scope.public_url.clone();
    if let Ok(mut segments) = url.path_segments_mut() {
        segments
            .pop_if_empty()
            .extend(["conversations", scope.conversation.as_str()])
            .extend(tail);
    }
    url.to_string()
}

impl ToolImpl for HandoffTool {
    fn call(&self, invocation: Invocation) -> ToolEvents {
        let tool = self.clone();
        stream::once(async move {
            match tool.hand_off(invocation).await {
                Ok(output) => ToolEvent::Output(output),
                Err(error) => ToolEvent::Failed(Failure::tool(error)),
            }
        })
        .boxed()
    }
}
