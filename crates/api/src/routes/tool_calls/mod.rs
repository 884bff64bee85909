//! The tool-call ledger: `GET /tool-calls` (the account's attempts, newest
//! first, filtered and cursor-paged) and `GET /tool-calls/{toolCallId}`.

mod view;

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_domain::{refuse_nul_text, AgentId, AttemptStatus, ToolCallId};
use toolserver_store::tool_calls::{self, AttemptFilter, Cursor};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use view::{PayloadView, ToolCallPage, ToolCallView};

use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiQuery;
use crate::routes::tools::list::page_limit;
use crate::state::AppState;

/// The ledger routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_tool_calls))
        .routes(routes!(get_tool_call))
}

/// Filters and paging of `GET /tool-calls`; every filter narrows.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ToolCallQuery {
    /// Only calls of the tool with this name.
    pub tool: Option<String>,
    /// Only attempts in this status.
    pub status: Option<String>,
    /// Only calls of this agent's turns.
    pub agent_id: Option<String>,
    /// Only calls of this conversation's turns.
    pub conversation_id: Option<String>,
    /// Only calls made for this end user (the subject of the token).
    pub user: Option<String>,
    /// Only attempts started at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Only attempts started before this time (RFC 3339).
    pub until: Option<String>,
    /// Page size, 1 to the configured maximum.
    pub limit: Option<u32>,
    /// `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

/// Lists the account's tool-call attempts, newest first.
#[utoipa::path(get, path = "/tool-calls", tag = "ledger",
    security(("bearer" = [])),
    params(ToolCallQuery),
    responses(
        (status = 200, description = "A page of attempts", body = ToolCallPage),
        (status = 400, description = "A filter, the limit or the cursor is malformed", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn list_tool_calls(
    Account(account): Account,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ToolCallQuery>,
) -> ApiResult<Json<ToolCallPage>> {
    let limit = page_limit(query.limit, state.settings())?;
    let filter = filter_of(&query)?;
    let cursor = query.cursor.as_deref().map(parse_cursor).transpose()?;
    let mut rows = tool_calls::list(
        state.pool(),
        &account,
        &filter,
        cursor,
        i64::from(limit) + 1,
    )
    .await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = more
        .then(|| rows.last().map(|row| cursor_of(row.started_at, row.id)))
        .flatten();
    Ok(Json(ToolCallPage {
        tool_calls: rows.into_iter().map(ToolCallView::from).collect(),
        next_cursor,
    }))
}

/// One attempt of a tool call.
#[utoipa::path(get, path = "/tool-calls/{toolCallId}", tag = "ledger",
    security(("bearer" = [])),
    params(("toolCallId" = String, Path, description = "The attempt's id (`tcl_…`)")),
    responses(
        (status = 200, description = "The attempt", body = ToolCallView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such attempt in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(tool_call.id = %id))]
pub async fn get_tool_call(
    Account(account): Account,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ToolCallView>> {
    let not_found = || ApiError::NotFound("tool call");
    let parsed = ToolCallId::parse(&id).ok_or_else(not_found)?;
    let row = tool_calls::get(state.pool(), &account, parsed.as_uuid())
        .await
        .map_err(|err| match err {
            toolserver_store::StoreError::NotFound => not_found(),
            other => other.into(),
        })?;
    Ok(Json(ToolCallView::from(row)))
}

/// The store's filter of `query`, each malformed value a 400 naming it.
fn filter_of(query: &ToolCallQuery) -> Result<AttemptFilter, ApiError> {
    let texts = [
        ("tool", &query.tool),
        ("conversationId", &query.conversation_id),
        ("user", &query.user),
    ];
    for (field, text) in texts {
        if let Some(text) = text {
            refuse_nul_text(field, text).map_err(|err| ApiError::bad_field(field, err.message))?;
        }
    }
    let status = match query.status.as_deref() {
        Some(raw) => Some(AttemptStatus::parse(raw).ok_or_else(|| {
            let names: Vec<&str> = AttemptStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_field(
                "status",
                format!("status must be one of {}", names.join(", ")),
            )
        })?),
        None => None,
    };
    let agent_id = match query.agent_id.as_deref() {
        Some(raw) => Some(
            AgentId::parse(raw)
                .ok_or_else(|| ApiError::bad_field("agentId", "agentId is not an agent id"))?
                .as_uuid(),
        ),
        None => None,
    };
    Ok(AttemptFilter {
        tool_name: query.tool.clone(),
        status,
        agent_id,
        conversation_id: query.conversation_id.clone(),
        subject: query.user.clone(),
        since: query
            .since
            .as_deref()
            .map(|raw| time_of("since", raw))
            .transpose()?,
        until: query
            .until
            .as_deref()
            .map(|raw| time_of("until", raw))
            .transpose()?,
    })
}

fn time_of(field: &str, raw: &str) -> Result<OffsetDateTime, ApiError> {
    OffsetDateTime::parse(raw, &Rfc3339)
        .map_err(|_| ApiError::bad_field(field, format!("{field} must be an RFC 3339 time")))
}

/// A cursor after the attempt started at `started_at` with `id`.
fn cursor_of(started_at: OffsetDateTime, id: uuid::Uuid) -> String {
    format!(
        "{}.{}",
        started_at.unix_timestamp_nanos() / 1000,
        id.simple()
    )
}

fn parse_cursor(raw: &str) -> Result<Cursor, ApiError> {
    let malformed = || ApiError::bad_field("cursor", "cursor is not one this server gave");
    let (micros, id) = raw.split_once('.').ok_or_else(malformed)?;
    let micros: i128 = micros.parse().map_err(|_| malformed())?;
    let started_at =
        OffsetDateTime::from_unix_timestamp_nanos(micros * 1000).map_err(|_| malformed())?;
    let id = uuid::Uuid::try_parse(id).map_err(|_| malformed())?;
    Ok(Cursor { started_at, id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_forged_one_is_refused() {
        let started_at =
            OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_000).unwrap();
        let id = uuid::Uuid::now_v7();
        let cursor = parse_cursor(&cursor_of(started_at, id)).unwrap();
        assert_eq!(cursor, Cursor { started_at, id });
        for forged in ["", "x", "12.zz", "abc.0190c7a4e9a27c3b8e3f1b1a2c3d4e5f"] {
            assert!(parse_cursor(forged).is_err(), "{forged}");
        }
    }
}
