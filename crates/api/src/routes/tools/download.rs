//! Getting a tool's bundle back: the bytes themselves, or a short-lived
//! signed link that works without a token (what runners download).

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use toolserver_domain::Sha256Digest;
use toolserver_store::{tools, ToolRecord};

use super::wire::BundleUrlView;
use super::{parse_tool_id, tool_not_found};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::routes::bundles::bundle_response;
use crate::state::AppState;

/// Downloads the current bundle of one of the caller's tools.
#[utoipa::path(get, path = "/accounts/me/tools/{toolId}/bundle", tag = "tools",
    security(("bearer" = [])),
    params(("toolId" = String, Path, description = "Tool id")),
    responses(
        (status = 200, description = "Bundle bytes", content_type = "text/javascript", body = Vec<u8>),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such tool in this account, or the tool is an `http` tool, which has no bundle", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(tool.id = %tool_id))]
pub async fn download_bundle(
    Account(account): Account,
    State(state): State<AppState>,
    Path(tool_id): Path<String>,
) -> ApiResult<Response> {
    let id = parse_tool_id(&tool_id)?;
    let record = tools::get(state.pool(), &account, id)
        .await
        .map_err(tool_not_found)?;
    let sha256 = bundle_of(&record)?;
    let bytes = state.bundles().get(sha256).await?;
    Ok(bundle_response(sha256, bytes))
}

/// Mints a short-lived download link for the current bundle of one of the caller's tools.
#[utoipa::path(get, path = "/accounts/me/tools/{toolId}/bundle-url", tag = "tools",
    security(("bearer" = [])),
    params(("toolId" = String, Path, description = "Tool id")),
    responses(
        (status = 200, description = "A signed link", body = BundleUrlView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such tool in this account, or the tool is an `http` tool, which has no bundle", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(tool.id = %tool_id))]
pub async fn bundle_url(
    Account(account): Account,
    State(state): State<AppState>,
    Path(tool_id): Path<String>,
) -> ApiResult<Json<BundleUrlView>> {
    let id = parse_tool_id(&tool_id)?;
    let record = tools::get(state.pool(), &account, id)
        .await
        .map_err(tool_not_found)?;
    let sha256 = bundle_of(&record)?;
    let signed = state
        .bundles()
        .signed_url(sha256, state.settings().signed_url_ttl)
        .await?;
    Ok(Json(BundleUrlView {
        url: signed.url.to_string(),
        expires_at: signed.expires_at,
        bundle_sha256: sha256.to_hex(),
    }))
}

/// The bundle of `record`; an `http` tool has none (404).
fn bundle_of(record: &ToolRecord) -> ApiResult<&Sha256Digest> {
    record
        .body
        .bundle_sha256()
        .ok_or(ApiError::NotFound("bundle"))
}
