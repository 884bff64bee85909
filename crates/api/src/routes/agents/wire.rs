//! Request and response bodies of the agent routes.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use toolserver_store::AgentRecord;
use utoipa::ToSchema;

/// A new agent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentBody {
    /// Human-facing name, 1-100 characters.
    pub name: String,
    /// `{ model: { provider, modelId, options? }, provider?: { <openai | anthropic |
    /// google>: { apiKey?, baseUrl? } }, systemPrompt?, maxSteps?, onDisconnect?: "continue" |
    /// "cancel", tools?: { <builtin name | toolId>: { enabled?, async?, needsApproval?,
    /// timeoutMs?, ...options } }, policies?: <Cedar text> }`.
    #[schema(value_type = Object)]
    pub config: Value,
}

/// Changes to an agent: a new name, a whole new config, or both. A credential
/// sent as `"[redacted]"` keeps the stored one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPatch {
    /// New name.
    pub name: Option<String>,
    /// New config (replaces the old one whole).
    #[schema(value_type = Option<Object>)]
    pub config: Option<Value>,
}

/// An agent as the API shows it; credentials read `"[redacted]"`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    /// Stable id, `agent_` + 32 hex characters.
    pub agent_id: String,
    /// Human-facing name.
    pub name: String,
    /// The config, credentials redacted.
    #[schema(value_type = Object)]
    pub config: Value,
    /// 1 on creation, plus one per update.
    pub version: i32,
    /// Settings that were accepted but have no effect, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Creation time (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// Last change (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

impl AgentView {
    /// The view of a stored agent, with the warnings its config raised.
    pub fn new(record: AgentRecord, warnings: Vec<String>) -> Self {
        Self {
            agent_id: record.id.to_string(),
            name: record.name,
            config: record.config,
            version: record.version,
            warnings,
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// A page of agents.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentPage {
    /// The agents, in creation order.
    pub agents: Vec<AgentView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}
