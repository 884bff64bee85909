//! `PATCH /accounts/me/tools/{toolId}`: change manifest fields and/or the
//! bundle. Every successful update adds one to the version; a new bundle gets
//! a new hash, so runners load the new module.

use axum::extract::{Path, Request, State};
use axum::Json;
use toolserver_domain::http_tool::HttpTool;
use toolserver_domain::{
    InputSchema, ToolConfig, ToolDescription, ToolLimits, ToolName, ValidationError,
};
use toolserver_store::{tools, ToolBody, ToolPatch, ToolRecord};

use super::create::{
    check_http_destination, effects_conflict, egress_allow, http_egress, parse_effects,
    parse_retry, tool_connection,
};
use super::upload::{read_upload, WithBase64Bundle};
use super::wire::{ToolView, UpdateManifest, UpdateToolForm, UpdateToolJson};
use super::{parse_tool_id, tool_not_found};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

impl WithBase64Bundle for UpdateToolJson {
    type Manifest = UpdateManifest;

    fn split(self) -> (UpdateManifest, Option<String>) {
        let manifest = UpdateManifest {
            name: self.name,
            description: self.description,
            input_schema: self.input_schema,
            default_config: self.default_config,
            egress: self.egress,
            effects: self.effects,
            retry: self.retry,
            http: self.http,
            connection: self.connection,
        };
        (manifest, self.bundle)
    }
}

fn validate_changes(m: UpdateManifest, limits: &ToolLimits) -> Result<ToolPatch, ValidationError> {
    Ok(ToolPatch {
        name: m.name.as_deref().map(ToolName::parse).transpose()?,
        description: m
            .description
            .as_deref()
            .map(|d| ToolDescription::parse(d, limits))
            .transpose()?,
        input_schema: m
            .input_schema
            .map(|s| InputSchema::parse(s, limits))
            .transpose()?,
        default_config: m
            .default_config
            .map(|c| ToolConfig::parse(c, limits))
            .transpose()?,
        egress_allow: m
            .egress
            .map(|egress| egress_allow(Some(egress)))
            .transpose()?,
        effects: parse_effects(m.effects.as_deref())?,
        retry: parse_retry(m.retry.as_ref())?,
        connection: m
            .connection
            .map(|name| tool_connection(Some(name), None))
            .transpose()?,
        body: m
            .http
            .map(HttpTool::parse)
            .transpose()?
            .map(|http| ToolBody::Http(Box::new(http))),
    })
}

/// Completes a patch that changes the effects or the retry policy with the
/// other as `current` has it, and refuses a pair a tool may not declare
/// (a `side_effect` tool that would try a call more than once) as 409
/// `tool_effects_conflict`: each field is valid alone, the pair the tool
/// would hold is not. Both are written together, so a stored tool always
/// holds a pair checked as one.
fn settle_effects(patch: &mut ToolPatch, current: &ToolRecord) -> Result<(), ApiError> {
    if patch.effects.is_none() && patch.retry.is_none() {
        return Ok(());
    }
    let effects = patch.effects.unwrap_or(current.effects);
    let retry = patch.retry.unwrap_or(current.retry);
    if let Err(refused) = retry.check_for(effects) {
        let advice = match (patch.effects.is_some(), patch.retry.is_some()) {
            (true, true) => "change one of them",
            (true, false) => "the tool keeps its retry: send both together",
            _ => "the tool keeps its effects: send both together",
        };
        return Err(effects_conflict(&refused, advice));
    }
    patch.effects = Some(effects);
    patch.retry = Some(retry);
    Ok(())
}

/// Refuses a patch that would change what kind of tool `current` is (409
/// `tool_kind_conflict`), and keeps an HTTP tool's egress allow list
/// covering its URL's host: a new request without a new list allows its
/// own host when the kept list does not.
fn settle_kind(
    patch: &mut ToolPatch,
    current: &ToolRecord,
    new_bundle: bool,
) -> Result<(), ApiError> {
    let conflict = |message: &str| ApiError::Conflict {
        code: "tool_kind_conflict",
        message: message.to_owned(),
    };
    match (&current.body, &patch.body) {
        (ToolBody::Http(_), _) if new_bundle => Err(conflict(
            "this is an `http` tool: it has no bundle; send `http` to change its request",
        )),
        (ToolBody::Bundle { .. }, Some(ToolBody::Http(_))) => Err(conflict(
            "this is a `bundle` tool: it has no `http` request; create an `http` tool instead",
        )),
        (ToolBody::Http(kept), new) => {
            let http = match new {
                Some(ToolBody::Http(http)) => http,
                _ => kept,
            };
            let sent = patch.connection.take().flatten();
            if sent.is_some() || new.is_some() {
                patch.connection = Some(tool_connection(sent, Some(http))?);
            }
            let sent = match patch.egress_allow.take() {
                Some(sent) => sent,
                None if new.is_none() => return Ok(()),
                None => current
                    .egress_allow
                    .clone()
                    .filter(|allow| allow.allows(http.url.host())),
            };
            patch.egress_allow = Some(Some(http_egress(http, sent)?));
            Ok(())
        }
        (ToolBody::Bundle { .. }, _) => Ok(()),
    }
}

/// Changes one of the caller's tools.
#[utoipa::path(patch, path = "/accounts/me/tools/{toolId}", tag = "tools",
    security(("bearer" = [])),
    params(("toolId" = String, Path, description = "Tool id")),
    request_body(content(
        (UpdateToolJson = "application/json"),
        (UpdateToolForm = "multipart/form-data"),
    )),
    responses(
        (status = 200, description = "The updated tool", body = ToolView),
        (status = 400, description = "Malformed body, unknown field, or no change", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such tool in this account", body = ErrorBody),
        (status = 409, description = "New name already used in this account (`tool_name_taken`), a bundle for an `http` tool or a request for a `bundle` tool (`tool_kind_conflict`), or new `effects` or `retry` that conflict with the other as the tool keeps it (`tool_effects_conflict`: a `side_effect` tool may not try a call more than once), in the patch or with what the tool keeps", body = ErrorBody),
        (status = 413, description = "Bundle or body over its limit", body = ErrorBody),
        (status = 415, description = "Unsupported content type", body = ErrorBody),
        (status = 422, description = "A field breaks a rule", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(tool.id = %tool_id))]
pub async fn update_tool(
    Account(account): Account,
    State(state): State<AppState>,
    Path(tool_id): Path<String>,
    req: Request,
) -> ApiResult<Json<ToolView>> {
    let id = parse_tool_id(&tool_id)?;
    let upload = read_upload::<UpdateToolJson>(req, &state).await?;
    let mut patch = validate_changes(
        upload.manifest.unwrap_or_default(),
        &state.settings().limits,
    )?;
    let nothing = patch.name.is_none()
        && patch.description.is_none()
        && patch.input_schema.is_none()
        && patch.default_config.is_none()
        && patch.egress_allow.is_none()
        && patch.effects.is_none()
        && patch.retry.is_none()
        && patch.body.is_none()
        && upload.bundle.is_none();
    // Check the tool is the caller's before storing any bytes for it.
    let current = tools::get(state.pool(), &account, id)
        .await
        .map_err(tool_not_found)?;
    if nothing {
        // A patch that changes nothing is answered with the tool as it is.
        return Ok(Json(current.into()));
    }
    settle_effects(&mut patch, &current)?;
    settle_kind(&mut patch, &current, upload.bundle.is_some())?;
    if let Some(ToolBody::Http(http)) = &patch.body {
        check_http_destination(&state, http).await?;
    }
    if let Some(bundle) = upload.bundle {
        let stored = state.bundles().put(bundle).await?;
        patch.body = Some(ToolBody::Bundle {
            sha256: stored.sha256,
            size: stored.size as i64,
        });
    }
    let updated = tools::update(state.pool(), &account, id, patch).await;
    state.tool_changed(id);
    Ok(Json(updated.map_err(tool_not_found)?.into()))
}
