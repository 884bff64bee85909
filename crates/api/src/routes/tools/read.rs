//! `GET /accounts/me/tools/{toolId}`.

use axum::extract::{Path, State};
use axum::Json;
use toolserver_store::tools;

use super::wire::ToolView;
use super::{parse_tool_id, tool_not_found};
use crate::auth::Account;
use crate::error::{ApiResult, ErrorBody};
use crate::state::AppState;

/// Reads one of the caller's tools.
#[utoipa::path(get, path = "/accounts/me/tools/{toolId}", tag = "tools",
    security(("bearer" = [])),
    params(("toolId" = String, Path, description = "Tool id")),
    responses(
        (status = 200, description = "The tool", body = ToolView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such tool in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(tool.id = %tool_id))]
pub async fn get_tool(
    Account(account): Account,
    State(state): State<AppState>,
    Path(tool_id): Path<String>,
) -> ApiResult<Json<ToolView>> {
    let id = parse_tool_id(&tool_id)?;
    let record = tools::get(state.pool(), &account, id)
        .await
        .map_err(tool_not_found)?;
    Ok(Json(record.into()))
}
