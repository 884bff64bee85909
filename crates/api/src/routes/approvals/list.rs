//! `GET /approvals` and `GET /approvals/{approvalId}`.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use time::OffsetDateTime;
use toolserver_domain::refuse_nul_text;
use toolserver_store::{approvals, StoreError};
use utoipa::IntoParams;

use super::wire::{ApprovalPage, ApprovalView};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiQuery;
use crate::routes::tools::list::page_limit;
use crate::state::AppState;

/// The statuses an approval can be in.
const STATUSES: [&str; 4] = ["pending", "approved", "denied", "expired"];

/// Filters and paging of `GET /approvals`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ApprovalQuery {
    /// Only approvals in this status.
    pub status: Option<String>,
    /// Only approvals of this conversation.
    pub conversation_id: Option<String>,
    /// Page size, 1 to the configured maximum.
    pub limit: Option<u32>,
    /// `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

/// Lists the account's approvals, newest first.
#[utoipa::path(get, path = "/approvals", tag = "approvals",
    security(("bearer" = [])),
    params(ApprovalQuery),
    responses(
        (status = 200, description = "A page of approvals", body = ApprovalPage),
        (status = 400, description = "A filter, the limit or the cursor is malformed", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn list_approvals(
    Account(account): Account,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ApprovalQuery>,
) -> ApiResult<Json<ApprovalPage>> {
    let limit = page_limit(query.limit, state.settings())?;
    if let Some(status) = &query.status {
        if !STATUSES.contains(&status.as_str()) {
            return Err(ApiError::bad_field(
                "status",
                format!("status must be one of {}", STATUSES.join(", ")),
            ));
        }
    }
    if let Some(conversation) = &query.conversation_id {
        refuse_nul_text("conversationId", conversation)
            .map_err(|err| ApiError::bad_field("conversationId", err.message))?;
    }
    let cursor = query.cursor.as_deref().map(parse_cursor).transpose()?;
    let mut rows = approvals::list(
        state.pool(),
        &account,
        query.status.as_deref(),
        query.conversation_id.as_deref(),
        cursor,
        i64::from(limit) + 1,
    )
    .await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = more
        .then(|| rows.last().map(|row| cursor_of(row.created_at, &row.id)))
        .flatten();
    Ok(Json(ApprovalPage {
        approvals: rows.into_iter().map(ApprovalView::from).collect(),
        next_cursor,
    }))
}

/// Reads one approval.
#[utoipa::path(get, path = "/approvals/{approvalId}", tag = "approvals",
    security(("bearer" = [])),
    params(("approvalId" = String, Path, description = "The approval's id (`apr_…`)")),
    responses(
        (status = 200, description = "The approval", body = ApprovalView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such approval in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(approval.id = %id))]
pub async fn get_approval(
    Account(account): Account,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ApprovalView>> {
    let record = approvals::get(state.pool(), &account, &id)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::NotFound("approval"),
            other => other.into(),
        })?;
    Ok(Json(record.into()))
}

/// A cursor after the approval created at `created_at` with `id`.
fn cursor_of(created_at: OffsetDateTime, id: &str) -> String {
    format!("{}.{id}", created_at.unix_timestamp_nanos() / 1000)
}

fn parse_cursor(raw: &str) -> Result<(OffsetDateTime, String), ApiError> {
    let malformed = || ApiError::bad_field("cursor", "cursor is not one this server gave");
    let (micros, id) = raw.split_once('.').ok_or_else(malformed)?;
    let micros: i128 = micros.parse().map_err(|_| malformed())?;
    let created_at =
        OffsetDateTime::from_unix_timestamp_nanos(micros * 1000).map_err(|_| malformed())?;
    let hex = id.strip_prefix("apr_").ok_or_else(malformed)?;
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(malformed());
    }
    Ok((created_at, id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_forged_one_is_refused() {
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_000).unwrap();
        let id = format!("apr_{}", "ab".repeat(16));
        let cursor = cursor_of(at, &id);
        assert_eq!(parse_cursor(&cursor).unwrap(), (at, id));
        for bad in [
            "",
            "1.",
            "x.apr_00",
            "1.tcl_00000000000000000000000000000000",
        ] {
            assert!(parse_cursor(bad).is_err(), "{bad}");
        }
    }
}
