//! `POST /policies/explain`: what the policies in force decide on one call
//! (by an end user, in an agent's turn or directly, of a tool with an
//! input), and the policies that decided it. Nothing runs.

use axum::extract::State;
use axum::Json;
use toolserver_domain::{
    refuse_nul_text, AccountId, AgentId, BuiltinTool, CallPath, ConversationId, ToolEffects,
    ValidationError,
};
use toolserver_harness::policy::{CallGate, Narrowing};
use toolserver_store::{tools, StoreError};

use super::wire::{ExplainBody, ExplainView};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Explains the decision on one call.
#[utoipa::path(post, path = "/policies/explain", tag = "policies",
    security(("bearer" = [])),
    request_body = ExplainBody,
    responses(
        (status = 200, description = "The decision (`allow`, `ask`, `deny`), the policies that made it and why", body = ExplainView),
        (status = 400, description = "Malformed body, conversation id or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account", body = ErrorBody),
        (status = 422, description = "No tool of this name (in the account, or among the agent's enabled tools), the agent's config is no longer valid, or a `conversationId` without `agentId`", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn explain_policies(
    Account(account): Account,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ExplainBody>,
) -> ApiResult<Json<ExplainView>> {
    refuse_nul_text("user", &body.user)?;
    refuse_nul_text("tool", &body.tool)?;
    if !body.input.is_object() {
        return Err(ValidationError::new("input", "must be an object").into());
    }
    let harness = state.harness();
    let (config, effects, agent) = match &body.agent_id {
        Some(raw) => {
            let agent = AgentId::parse(raw).ok_or(ApiError::NotFound("agent"))?;
            let checked = harness.load_agent(state.pool(), &account, agent).await?;
            let effects = checked
                .registry
                .get(&body.tool)
                .map(|tool| tool.effects)
                .ok_or_else(|| {
                    ValidationError::new(
                        "tool",
                        format!("the agent has no enabled tool named {:?}", body.tool),
                    )
                })?;
            (Some(checked.config), effects, Some(agent))
        }
        None => (
            None,
            account_tool(&state, &account, &body.tool).await?,
            None,
        ),
    };
    let user = Some(body.user).filter(|user| !user.is_empty());
    let conversation = match (&body.conversation_id, agent) {
        (Some(raw), Some(_)) => Some(ConversationId::parse("conversationId", raw)?),
        (Some(_), None) => {
            return Err(ValidationError::new(
                "conversationId",
                "a conversation holds an agent's turns: name the agent too",
            )
            .into())
        }
        (None, _) => None,
    };
    let narrowing = Narrowing {
        user: user.as_deref(),
        conversation: conversation.as_ref().map(ConversationId::as_str),
    };
    let stack = harness
        .policy_stack(&account, config.as_ref(), narrowing)
        .await?;
    let gate = match agent {
        Some(agent) => CallGate::new(stack, user, CallPath::Turn).in_turn(
            agent.to_string(),
            conversation.map(|c| c.as_str().to_owned()),
        ),
        None => CallGate::new(stack, user, CallPath::Invoke),
    };
    Ok(Json(gate.decide(&body.tool, effects, &body.input).into()))
}

/// The effects of `account`'s tool `name`: an uploaded tool, else a
/// built-in; a 422 naming `tool` when there is none.
async fn account_tool(state: &AppState, account: &AccountId, name: &str) -> ApiResult<ToolEffects> {
    match tools::get_by_name(state.pool(), account, name).await {
        Ok(record) => return Ok(record.effects),
        Err(StoreError::NotFound) => {}
        Err(err) => return Err(err.into()),
    }
    BuiltinTool::ALL
        .into_iter()
        .find(|builtin| builtin.name() == name)
        .map(BuiltinTool::effects)
        .ok_or_else(|| {
            ValidationError::new("tool", format!("the account has no tool named {name:?}")).into()
        })
}
