//! `GET /accounts/me/tools`: the caller's tools, a page at a time.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use toolserver_domain::ToolId;
use toolserver_store::tools;
use utoipa::IntoParams;

use super::wire::{ToolPage, ToolView};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiQuery;
use crate::state::{ApiSettings, AppState};

/// Paging parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Page size, 1 to the configured maximum (default 50, maximum 200).
    pub limit: Option<u32>,
    /// `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

impl ListParams {
    /// The page size asked for, or the default; 400 outside 1..=maximum.
    pub fn checked_limit(&self, settings: &ApiSettings) -> Result<u32, ApiError> {
        page_limit(self.limit, settings)
    }
}

/// The page size `limit` asks for, or the default; 400 outside 1..=maximum.
pub(crate) fn page_limit(limit: Option<u32>, settings: &ApiSettings) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(settings.default_page_size);
    if limit == 0 || limit > settings.max_page_size {
        return Err(ApiError::bad_field(
            "limit",
            format!("limit must be between 1 and {}", settings.max_page_size),
        ));
    }
    Ok(limit)
}

/// Lists the caller's tools in creation order.
#[utoipa::path(get, path = "/accounts/me/tools", tag = "tools",
    security(("bearer" = [])),
    params(ListParams),
    responses(
        (status = 200, description = "A page of tools", body = ToolPage),
        (status = 400, description = "Bad limit or cursor", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn list_tools(
    Account(account): Account,
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<ToolPage>> {
    let limit = params.checked_limit(state.settings())?;
    let after = match params.cursor.as_deref() {
        Some(raw) => Some(
            ToolId::parse(raw)
                .ok_or_else(|| ApiError::bad_field("cursor", "cursor is not a tool id"))?,
        ),
        None => None,
    };
    let (records, has_more) = tools::list(state.pool(), &account, after, limit).await?;
    let next_cursor = has_more
        .then(|| records.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(Json(ToolPage {
        tools: records.into_iter().map(ToolView::from).collect(),
        next_cursor,
    }))
}
