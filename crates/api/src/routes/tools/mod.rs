//! `/accounts/me/tools`: upload, list, read, update, delete and download
//! account-owned tools. Every route is scoped to the caller's account; another
//! account's tool id answers 404 exactly like a missing one.

mod create;
mod delete;
mod download;
mod import;
mod invoke;
pub(crate) mod list;
mod read;
mod update;
mod upload;
mod wire;

use toolserver_domain::ToolId;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::state::AppState;

pub use import::{ImportBody, ImportView, ImportedTool, SkippedOperationView};
pub use invoke::{InvokeBody, InvokeResult, ToolError};
pub use list::ListParams;
pub use wire::{
    BundleUrlView, CreateToolForm, CreateToolJson, ToolKind, ToolManifest, ToolPage, ToolView,
    UpdateManifest, UpdateToolForm, UpdateToolJson,
};

/// The tool routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create::create_tool, list::list_tools))
        .routes(routes!(
            read::get_tool,
            update::update_tool,
            delete::delete_tool
        ))
        .routes(routes!(download::download_bundle))
        .routes(routes!(download::bundle_url))
        .routes(routes!(invoke::invoke_tool))
        .routes(routes!(import::import_tools))
}

/// Parses a tool id from a path; a malformed id is simply not found.
fn parse_tool_id(raw: &str) -> Result<ToolId, ApiError> {
    ToolId::parse(raw).ok_or(ApiError::NotFound("tool"))
}

/// Maps "no such row" to a tool-specific 404.
fn tool_not_found(err: toolserver_store::StoreError) -> ApiError {
    match err {
        toolserver_store::StoreError::NotFound => ApiError::NotFound("tool"),
        other => other.into(),
    }
}
