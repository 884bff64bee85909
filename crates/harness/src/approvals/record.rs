//! Recording the approvals a turn asks for, and announcing them.

use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::approvals::{self, NewApproval};
use toolserver_store::webhook_deliveries::{self, NewDelivery};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::{AskedApproval, LinkToken};
use crate::lifecycle::Lifecycle;

/// Where a turn asked: its account, agent, conversation, assistant message
/// and end user.
#[derive(Debug, Clone)]
pub struct AskedScope {
    /// The account.
    pub account: AccountId,
    /// The agent.
    pub agent: Uuid,
    /// The conversation.
    pub conversation: String,
    /// The assistant message holding the calls.
    pub message: String,
    /// The end user the turn acts for.
    pub subject: Option<String>,
}

impl Lifecycle {
    /// Records `asked` (one approval per call, each with a one-time link
    /// and the account's expiry) and queues their announcement on the
    /// account's approval webhook, in one transaction.
    pub async fn record_asked(
        &self,
        scope: &AskedScope,
        asked: &[AskedApproval],
    ) -> Result<(), StoreError> {
        if asked.is_empty() {
            return Ok(());
        }
        let settings = self.harness().settings();
        let expires_at = OffsetDateTime::now_utc() + settings.lifecycle.approval_ttl;
        let webhook = approvals::webhook_of(self.pool(), &scope.account).await?;
        let mut rows = Vec::with_capacity(asked.len());
        let mut announcements = Vec::new();
        for call in asked {
            let link = LinkToken::mint();
            rows.push(NewApproval {
                id: call.approval_id.clone(),
                agent_id: scope.agent,
                conversation_id: scope.conversation.clone(),
                message_id: scope.message.clone(),
                tool_call_id: call.tool_call_id.clone(),
                tool: call.tool.clone(),
                input: call.input.clone(),
                subject: scope.subject.clone(),
                approvers: call.approvers.clone(),
                why: call.why.clone(),
                link_sha256: link.sha256(),
                expires_at,
            });
            if let Some(url) = &webhook {
                announcements.push(NewDelivery {
                    id: Uuid::now_v7(),
                    kind: "approval",
                    url: url.clone(),
                    body: json!({
                        "type": "approval.requested",
                        "approval": {
                            "id": call.approval_id,
                            "agentId": scope.agent,
                            "conversationId": scope.conversation,
                            "messageId": scope.message,
                            "toolCallId": call.tool_call_id,
                            "tool": call.tool,
                            "input": call.input,
                            "user": scope.subject,
                            "approvers": call.approvers,
                            "why": call.why,
                            "expiresAt": expires_at.format(&Rfc3339).unwrap_or_default(),
                        },
                        "link": link.url(&settings.public_url),
                    }),
                });
            }
        }
        let mut tx = self.pool().begin().await?;
        approvals::insert(&mut tx, &scope.account, &rows).await?;
        for announcement in &announcements {
            webhook_deliveries::insert(&mut tx, &scope.account, &scope.conversation, announcement)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
