//! Request and response bodies of the policy routes.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use toolserver_harness::policy::Verdict;
use toolserver_store::policies::PolicyRecord;
use toolserver_store::scoped_policies::ScopedPolicyRecord;
use utoipa::ToSchema;

/// The account's policies, replaced whole.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoliciesBody {
    /// Cedar policy text; empty: no policies in force.
    pub policies: String,
    /// Where the account's new approvals are announced (a JSON post with
    /// the approval and its one-time link); absent or null: nowhere.
    #[serde(rename = "approvalWebhook")]
    pub approval_webhook: Option<String>,
}

/// The account's policies as stored.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoliciesView {
    /// Cedar policy text (empty when none were ever saved).
    pub policies: String,
    /// Saves so far (0: never saved).
    pub version: i64,
    /// When they were last saved.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub updated_at: Option<OffsetDateTime>,
    /// Where the account's new approvals are announced, if anywhere.
    pub approval_webhook: Option<String>,
}

impl From<Option<PolicyRecord>> for PoliciesView {
    fn from(record: Option<PolicyRecord>) -> Self {
        match record {
            Some(record) => Self {
                policies: record.text,
                version: record.version,
                updated_at: Some(record.updated_at),
                approval_webhook: record.approval_webhook,
            },
            None => Self {
                policies: String::new(),
                version: 0,
                updated_at: None,
                approval_webhook: None,
            },
        }
    }
}

/// One call to ask the policies about.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExplainBody {
    /// The end user (a token's `sub`); empty for none.
    pub user: String,
    /// The agent whose turn makes the call; its policies and its tools'
    /// effects count. Without it, the call is a direct one (`invoke`).
    pub agent_id: Option<String>,
    /// The conversation the agent's turn runs in (with `agentId`): its
    /// own policies count.
    pub conversation_id: Option<String>,
    /// The tool's model-facing name.
    pub tool: String,
    /// The call's arguments.
    #[schema(value_type = Object)]
    pub input: Value,
}

/// What the policies decide on a call, and why.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ExplainView {
    /// `allow`, `ask` or `deny`.
    pub decision: String,
    /// The policies that decided, as `<layer>:<id>` (`account`, `agent`,
    /// `user` or `conversation`).
    pub policies: Vec<String>,
    /// One sentence per layer that decided.
    pub reasons: Vec<String>,
}

impl From<Verdict> for ExplainView {
    fn from(verdict: Verdict) -> Self {
        Self {
            decision: verdict.decision.as_str().to_owned(),
            policies: verdict.policies,
            reasons: verdict.reasons,
        }
    }
}

/// The policies narrowing one end user's or one conversation's calls,
/// replaced whole.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopedPoliciesBody {
    /// Cedar policy text; empty: this layer has no say.
    pub policies: String,
}

/// A layer of policies narrowing one end user's or one conversation's
/// calls, as stored.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScopedPoliciesView {
    /// Cedar policy text (empty when none were ever saved).
    pub policies: String,
    /// Saves so far (0: never saved).
    pub version: i64,
    /// When they were last saved.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub updated_at: Option<OffsetDateTime>,
}

impl From<Option<ScopedPolicyRecord>> for ScopedPoliciesView {
    fn from(record: Option<ScopedPolicyRecord>) -> Self {
        match record {
            Some(record) => Self {
                policies: record.text,
                version: record.version,
                updated_at: Some(record.updated_at),
            },
            None => Self {
                policies: String::new(),
                version: 0,
                updated_at: None,
            },
        }
    }
}
