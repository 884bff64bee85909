//! `DELETE /accounts/me/tools/{toolId}`. The bundle stays in the
//! content-addressed store: other tools may share the same bytes.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use toolserver_store::tools;

use super::{parse_tool_id, tool_not_found};
use crate::auth::Account;
use crate::error::{ApiResult, ErrorBody};
use crate::state::AppState;

/// Deletes one of the caller's tools.
#[utoipa::path(delete, path = "/accounts/me/tools/{toolId}", tag = "tools",
    security(("bearer" = [])),
    params(("toolId" = String, Path, description = "Tool id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such tool in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(tool.id = %tool_id))]
pub async fn delete_tool(
    Account(account): Account,
    State(state): State<AppState>,
    Path(tool_id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_tool_id(&tool_id)?;
    let deleted = tools::delete(state.pool(), &account, id).await;
    state.tool_changed(id);
    deleted.map_err(tool_not_found)?;
    Ok(StatusCode::NO_CONTENT)
}
