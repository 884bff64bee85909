//! `POST /accounts/me/tools/import`: one HTTP tool per operation of an
//! OpenAPI 3.0 or 3.1 document. Each manifest the conversion makes passes
//! the same validation as a tool created by hand; a tool of the same name
//! that is already an HTTP tool is updated in place, so importing again
//! follows the document. Every operation selected is created, updated or
//! skipped with its reason.

mod fetch;
mod wire;

use std::collections::HashMap;

use axum::extract::State;
use axum::Json;
use serde_json::Value;
use toolserver_openapi::{convert, ConvertedTool, ImportOptions, SkippedOperation};
use toolserver_store::{tools, StoreError, ToolBody, ToolPatch, ToolRecord};

pub use wire::{ImportBody, ImportView, ImportedTool, SkippedOperationView};

use super::create::{check_http_destination, validate_manifest, ValidManifest};
use super::wire::ToolManifest;
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;
use toolserver_domain::{AccountId, ValidationError};

/// Creates (or updates) one HTTP tool per operation of an OpenAPI document.
#[utoipa::path(post, path = "/accounts/me/tools/import", tag = "tools",
    security(("bearer" = [])),
    request_body = ImportBody,
    responses(
        (status = 200, description = "What was created, updated and skipped (with reasons)", body = ImportView),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 422, description = "No document, both `document` and `url`, a document that is not OpenAPI 3.0 or 3.1, a URL that cannot be fetched, or an invalid option", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn import_tools(
    Account(account): Account,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ImportBody>,
) -> ApiResult<Json<ImportView>> {
    let limits = &state.settings().limits;
    let (document, source_url) = match (body.document, body.url) {
        (Some(document), None) => (fetch::from_body(document)?, None),
        (None, Some(url)) => {
            let (document, url) = fetch::from_url(&state, &url, limits.max_import_bytes).await?;
            (document, Some(url.to_string()))
        }
        _ => {
            return Err(ValidationError::new(
                "document",
                "send the OpenAPI document as `document`, or its address as `url`, not both",
            )
            .into())
        }
    };
    let options = ImportOptions {
        namespace: body.namespace,
        base_url: body.base_url,
        source_url,
        operations: body.operations,
        secret: body.secret,
        connection: body.connection,
    };
    let conversion = convert(&document, &options)
        .map_err(|err| ApiError::from(ValidationError::new("document", err.to_string())))?;
    let mut view = ImportView {
        unmatched: conversion.unmatched,
        skipped: conversion.skipped.into_iter().map(skipped_view).collect(),
        ..ImportView::default()
    };
    let mut destinations = HashMap::new();
    for converted in conversion.created {
        store_one(&state, &account, converted, &mut destinations, &mut view).await?;
    }
    tracing::info!(
        created = view.created.len(),
        updated = view.updated.len(),
        skipped = view.skipped.len(),
        "OpenAPI document imported"
    );
    Ok(Json(view))
}

/// Validates one converted manifest and stores it, recording where it
/// went. `destinations` keeps the verdict on each origin already checked.
async fn store_one(
    state: &AppState,
    account: &AccountId,
    converted: ConvertedTool,
    destinations: &mut HashMap<String, Option<String>>,
    view: &mut ImportView,
) -> ApiResult<()> {
    let skip = |reason: String| SkippedOperationView {
        operation: converted.operation.clone(),
        operation_id: converted.operation_id.clone(),
        reason,
    };
    let (manifest, body) = match checked(converted.manifest.clone(), state) {
        Ok(checked) => checked,
        Err(reason) => {
            view.skipped.push(skip(reason));
            return Ok(());
        }
    };
    if let Some(http) = &manifest.http {
        let origin = http
            .url
            .origin()
            .map(|url| url.to_string())
            .unwrap_or_default();
        if !destinations.contains_key(&origin) {
            let verdict = check_http_destination(state, http)
                .await
                .err()
                .map(|err| err.to_string());
            destinations.insert(origin.clone(), verdict);
        }
        if let Some(Some(refused)) = destinations.get(&origin) {
            view.skipped.push(skip(refused.clone()));
            return Ok(());
        }
    }
    let name = manifest.name.as_str().to_owned();
    let existing = match tools::get_by_name(state.pool(), account, &name).await {
        Ok(record) => Some(record),
        Err(StoreError::NotFound) => None,
        Err(err) => return Err(err.into()),
    };
    let imported = |record: ToolRecord| ImportedTool {
        operation: converted.operation.clone(),
        operation_id: converted.operation_id.clone(),
        tool_id: record.id.to_string(),
        name: record.name,
        notes: converted.notes.clone(),
    };
    match existing {
        None => match tools::insert(state.pool(), account, manifest.into_new_tool(body)).await {
            Ok(record) => view.created.push(imported(record)),
            Err(StoreError::Conflict { .. }) => view.skipped.push(skip(format!(
                "a tool named {name} was created in this account meanwhile"
            ))),
            Err(err) => return Err(err.into()),
        },
        Some(record) if matches!(record.body, ToolBody::Http(_)) => {
            let updated =
                tools::update(state.pool(), account, record.id, patch(manifest, body)).await;
            state.tool_changed(record.id);
            view.updated.push(imported(updated?));
        }
        Some(_) => view.skipped.push(skip(format!(
            "the name {name} is taken by an uploaded (bundle) tool in this account; import with another namespace"
        ))),
    }
    Ok(())
}

/// The manifest after the checks every tool passes, with its request, or
/// why it fails them.
fn checked(manifest: Value, state: &AppState) -> Result<(ValidManifest, ToolBody), String> {
    let manifest: ToolManifest = serde_json::from_value(manifest)
        .map_err(|err| format!("the converted manifest is not valid: {err}"))?;
    let valid = validate_manifest(manifest, &state.settings().limits).map_err(|err| match err {
        ApiError::Validation(refused) => format!("{}: {}", refused.field, refused.message),
        other => other.to_string(),
    })?;
    let body = valid
        .http
        .clone()
        .map(|http| ToolBody::Http(Box::new(http)))
        .ok_or_else(|| "the converted manifest has no HTTP request".to_owned())?;
    Ok((valid, body))
}

fn patch(manifest: ValidManifest, body: ToolBody) -> ToolPatch {
    ToolPatch {
        body: Some(body),
        name: None,
        description: Some(manifest.description),
        input_schema: Some(manifest.input_schema),
        default_config: Some(manifest.default_config),
        egress_allow: Some(manifest.egress_allow),
        effects: Some(manifest.effects),
        retry: Some(manifest.retry),
        connection: Some(manifest.connection),
    }
}

fn skipped_view(skipped: SkippedOperation) -> SkippedOperationView {
    SkippedOperationView {
        operation: skipped.operation,
        operation_id: skipped.operation_id,
        reason: skipped.reason,
    }
}
