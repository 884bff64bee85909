//! Create, list, read, update and delete agents.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;
use toolserver_domain::{AccountId, AgentId, AgentName, Secrets};
use toolserver_store::config_changes::ConfigChange;
use toolserver_store::{agents, AgentWrite};

use super::wire::{AgentBody, AgentPage, AgentPatch, AgentView};
use super::{agent_not_found, parse_agent_id, registry_error};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::routes::tools::ListParams;
use crate::state::AppState;

/// A config split into its stored (redacted) form and its sealed
/// credentials, after passing every check.
struct PreparedConfig {
    redacted: Value,
    sealed: Option<Vec<u8>>,
    warnings: Vec<String>,
}

/// Checks `config` (credentials in place, or `"[redacted]"` standing for
/// those in `stored`) and seals its credentials for `agent`.
async fn prepare_config(
    state: &AppState,
    account: &AccountId,
    agent: AgentId,
    config: Value,
    stored: &Secrets,
) -> ApiResult<PreparedConfig> {
    let harness = state.harness();
    let mut redacted = config;
    let secrets = Secrets::lift(&mut redacted, stored)?;
    let mut full = redacted.clone();
    secrets.restore(&mut full);
    let checked = harness
        .check_for_save(account, &full)
        .await
        .map_err(registry_error)?;
    Ok(PreparedConfig {
        sealed: harness.sealer().seal(&secrets, account, agent),
        redacted,
        warnings: checked.registry.warnings().to_vec(),
    })
}

/// Creates an agent.
#[utoipa::path(post, path = "/agents", tag = "agents",
    security(("bearer" = [])),
    request_body = AgentBody,
    responses(
        (status = 201, description = "The agent", body = AgentView),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 422, description = "Invalid config; `field` names the offending setting", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn create_agent(
    Account(account): Account,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<AgentBody>,
) -> ApiResult<(StatusCode, Json<AgentView>)> {
    let name = AgentName::parse(&body.name)?;
    let id = AgentId::generate();
    let prepared = prepare_config(&state, &account, id, body.config, &Secrets::default()).await?;
    let write = AgentWrite {
        name,
        config: prepared.redacted,
        sealed_secrets: prepared.sealed,
    };
    let record = agents::insert(state.pool(), &account, id, write).await?;
    Ok((
        StatusCode::CREATED,
        Json(AgentView::new(record, prepared.warnings)),
    ))
}

/// Lists the caller's agents in creation order.
#[utoipa::path(get, path = "/agents", tag = "agents",
    security(("bearer" = [])),
    params(ListParams),
    responses(
        (status = 200, description = "A page of agents", body = AgentPage),
        (status = 400, description = "Bad limit or cursor", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn list_agents(
    Account(account): Account,
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<AgentPage>> {
    let limit = params.checked_limit(state.settings())?;
    let after = match params.cursor.as_deref() {
        Some(raw) => Some(
            AgentId::parse(raw)
                .ok_or_else(|| ApiError::bad_field("cursor", "cursor is not an agent id"))?,
        ),
        None => None,
    };
    let (records, has_more) = agents::list(state.pool(), &account, after, limit).await?;
    let next_cursor = has_more
        .then(|| records.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(Json(AgentPage {
        agents: records
            .into_iter()
            .map(|record| AgentView::new(record, Vec::new()))
            .collect(),
        next_cursor,
    }))
}

/// Reads one of the caller's agents.
#[utoipa::path(get, path = "/agents/{agentId}", tag = "agents",
    security(("bearer" = [])),
    params(("agentId" = String, Path, description = "Agent id")),
    responses(
        (status = 200, description = "The agent", body = AgentView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id))]
pub async fn get_agent(
    Account(account): Account,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
) -> ApiResult<Json<AgentView>> {
    let id = parse_agent_id(&agent_id)?;
    let record = agents::get(state.pool(), &account, id)
        .await
        .map_err(agent_not_found)?;
    Ok(Json(AgentView::new(record, Vec::new())))
}

/// Renames an agent and/or replaces its config.
#[utoipa::path(patch, path = "/agents/{agentId}", tag = "agents",
    security(("bearer" = [])),
    params(("agentId" = String, Path, description = "Agent id")),
    request_body = AgentPatch,
    responses(
        (status = 200, description = "The updated agent", body = AgentView),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account", body = ErrorBody),
        (status = 422, description = "Invalid config; `field` names the offending setting", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id))]
pub async fn update_agent(
    Account(account): Account,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
    ApiJson(patch): ApiJson<AgentPatch>,
) -> ApiResult<Json<AgentView>> {
    let id = parse_agent_id(&agent_id)?;
    let current = agents::get(state.pool(), &account, id)
        .await
        .map_err(agent_not_found)?;
    let name = AgentName::parse(patch.name.as_deref().unwrap_or(&current.name))?;
    let (config, sealed_secrets, warnings) = match patch.config {
        Some(config) => {
            let stored = state
                .harness()
                .sealer()
                .open(current.sealed_secrets.as_deref(), &account, id)
                .map_err(|err| ApiError::Internal(err.to_string()))?;
            let prepared = prepare_config(&state, &account, id, config, &stored).await?;
            (prepared.redacted, prepared.sealed, prepared.warnings)
        }
        None => (current.config, current.sealed_secrets, Vec::new()),
    };
    let write = AgentWrite {
        name,
        config,
        sealed_secrets,
    };
    let updated = agents::update(state.pool(), &account, id, write).await;
    state.config_changed(&ConfigChange::Agent(account, id));
    let record = updated.map_err(agent_not_found)?;
    Ok(Json(AgentView::new(record, warnings)))
}

/// Deletes an agent and its conversations.
#[utoipa::path(delete, path = "/agents/{agentId}", tag = "agents",
    security(("bearer" = [])),
    params(("agentId" = String, Path, description = "Agent id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such agent in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(agent.id = %agent_id))]
pub async fn delete_agent(
    Account(account): Account,
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_agent_id(&agent_id)?;
    state.lifecycle().agent_deleted(&account, id).await?;
    let deleted = agents::delete(state.pool(), &account, id).await;
    state.config_changed(&ConfigChange::Agent(account, id));
    deleted.map_err(agent_not_found)?;
    Ok(StatusCode::NO_CONTENT)
}
