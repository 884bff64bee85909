//! `POST /accounts/me/tools`: upload a tool.
//!
//! Order: parse the body, validate the manifest, check the bundle, store the
//! bundle (content-addressed, so a retry or a duplicate costs nothing), then
//! insert the row. A failed insert leaves at most an unreferenced bundle.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::Value;
use toolserver_domain::http_tool::{is_secret_name, HttpRequestSpec, HttpTool};
use toolserver_domain::{
    EgressAllowList, InputSchema, RetrySpec, ToolConfig, ToolDescription, ToolEffects, ToolLimits,
    ToolName, ValidationError,
};
use toolserver_harness::outbound;
use toolserver_store::{tools, NewTool, ToolBody};

use super::upload::{read_upload, WithBase64Bundle};
use super::wire::{CreateToolForm, CreateToolJson, ToolEgress, ToolManifest, ToolView};
use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

impl WithBase64Bundle for CreateToolJson {
    type Manifest = ToolManifest;

    fn split(self) -> (ToolManifest, Option<String>) {
        let manifest = ToolManifest {
            name: self.name,
            description: self.description,
            input_schema: self.input_schema,
            default_config: self.default_config,
            egress: self.egress,
            effects: self.effects,
            retry: self.retry,
            kind: self.kind,
            http: self.http,
            connection: self.connection,
        };
        (manifest, self.bundle)
    }
}

/// A manifest whose every field passed validation.
pub struct ValidManifest {
    /// Model-facing name.
    pub name: ToolName,
    /// Model-facing description.
    pub description: ToolDescription,
    /// Input schema.
    pub input_schema: InputSchema,
    /// Default configuration.
    pub default_config: ToolConfig,
    /// Egress allow list; `None`: any public host.
    pub egress_allow: Option<EgressAllowList>,
    /// What a call does to the world.
    pub effects: ToolEffects,
    /// The declared retry policy, allowed for `effects`.
    pub retry: RetrySpec,
    /// The request, for an `http` tool.
    pub http: Option<HttpTool>,
    /// The connection calls act through.
    pub connection: Option<String>,
}

impl ValidManifest {
    /// The tool to insert: this manifest, running `body`.
    pub fn into_new_tool(self, body: ToolBody) -> NewTool {
        NewTool {
            name: self.name,
            description: self.description,
            input_schema: self.input_schema,
            default_config: self.default_config,
            egress_allow: self.egress_allow,
            effects: self.effects,
            retry: self.retry,
            body,
            connection: self.connection,
        }
    }
}

/// Validates every manifest field, reporting the first that fails (422);
/// effects and a retry policy that a tool may not hold together are 409
/// `tool_effects_conflict`.
pub fn validate_manifest(m: ToolManifest, limits: &ToolLimits) -> Result<ValidManifest, ApiError> {
    let effects = parse_effects(m.effects.as_deref())?.unwrap_or_default();
    let retry = parse_retry(m.retry.as_ref())?.unwrap_or_default();
    if let Err(refused) = retry.check_for(effects) {
        return Err(effects_conflict(&refused, "change one of them"));
    }
    let http = http_request(m.kind.as_deref(), m.http)?;
    let egress_allow = match &http {
        Some(http) => Some(http_egress(http, egress_allow(m.egress)?)?),
        None => egress_allow(m.egress)?,
    };
    let connection = tool_connection(m.connection, http.as_ref())?;
    Ok(ValidManifest {
        name: ToolName::parse(&m.name)?,
        description: ToolDescription::parse(&m.description, limits)?,
        input_schema: InputSchema::parse(m.input_schema, limits)?,
        default_config: match m.default_config {
            Some(value) => ToolConfig::parse(value, limits)?,
            None => ToolConfig::default(),
        },
        egress_allow,
        effects,
        retry,
        http,
        connection,
    })
}

/// The connection a tool acts through: an `http` tool's templates name it
/// (a `connection` sent must be that one); a bundle tool's manifest does.
pub fn tool_connection(
    sent: Option<String>,
    http: Option<&HttpTool>,
) -> Result<Option<String>, ValidationError> {
    if let Some(name) = &sent {
        if !is_secret_name(name) {
            return Err(ValidationError::new(
                "connection",
                "must be an OAuth provider's name: 1-64 letters, digits or '_'",
            ));
        }
    }
    let Some(http) = http else { return Ok(sent) };
    match (sent, http.connection()) {
        (Some(sent), named) if named != Some(sent.as_str()) => Err(ValidationError::new(
            "connection",
            format!(
                "is {sent:?}, but the request's templates name {}",
                named.map_or("no connection".to_owned(), |named| format!("{named:?}"))
            ),
        )),
        (_, named) => Ok(named.map(str::to_owned)),
    }
}

/// The request of a manifest of `kind` (`bundle` unless said, or `http`
/// when only `http` is sent), checked.
fn http_request(
    kind: Option<&str>,
    http: Option<HttpRequestSpec>,
) -> Result<Option<HttpTool>, ValidationError> {
    match (kind, http) {
        (None | Some("http"), Some(spec)) => HttpTool::parse(spec).map(Some),
        (Some("http"), None) => Err(ValidationError::new(
            "http",
            "an `http` tool needs its request: method and url at least",
        )),
        (None | Some("bundle"), None) => Ok(None),
        (Some("bundle"), Some(_)) => Err(ValidationError::new(
            "http",
            "only an `http` tool has a request; a `bundle` tool's code makes its own",
        )),
        (Some(other), _) => Err(ValidationError::new(
            "kind",
            format!("{other:?} is not a tool kind: `bundle` or `http`"),
        )),
    }
}

/// Refuses (422 naming `http.url`) an HTTP tool whose host is not one the
/// server may reach now: an address that is not public, or a name that
/// resolves to one, unless the server allows private destinations. Every
/// call is judged again when it connects.
pub async fn check_http_destination(state: &AppState, http: &HttpTool) -> Result<(), ApiError> {
    let harness = state.harness();
    let origin = http
        .url
        .origin()
        .map_err(|reason| ValidationError::new("http.url", reason))?;
    outbound::check_destination(
        &origin,
        &harness.sources().policy,
        harness.settings().outbound_resolve_timeout,
    )
    .await
    .map_err(|reason| ValidationError::new("http.url", reason).into())
}

/// The egress allow list of an HTTP tool: as sent, which must allow the
/// URL's host, or else that host alone.
pub fn http_egress(
    http: &HttpTool,
    sent: Option<EgressAllowList>,
) -> Result<EgressAllowList, ValidationError> {
    let host = http.url.host();
    match sent {
        Some(allow) if allow.allows(host) => Ok(allow),
        Some(_) => Err(ValidationError::new(
            "egress.allow",
            format!("does not allow {host}, the host of http.url"),
        )),
        None => EgressAllowList::parse(&[host.to_owned()]).map_err(|_| {
            ValidationError::new(
                "http.url",
                format!(
                    "{host} cannot be an egress host name; name the allowed hosts in egress.allow"
                ),
            )
        }),
    }
}

/// The effects an `effects` field states, if it states them.
pub fn parse_effects(raw: Option<&str>) -> Result<Option<ToolEffects>, ValidationError> {
    raw.map(|raw| ToolEffects::parse("effects", raw))
        .transpose()
}

/// The retry policy a `retry` field declares, if it declares one.
pub fn parse_retry(value: Option<&Value>) -> Result<Option<RetrySpec>, ValidationError> {
    value.map(RetrySpec::parse).transpose()
}

/// The allow list an `egress` field states, if it states one.
pub fn egress_allow(
    egress: Option<ToolEgress>,
) -> Result<Option<EgressAllowList>, ValidationError> {
    egress
        .and_then(|egress| egress.allow)
        .map(|patterns| EgressAllowList::parse(&patterns))
        .transpose()
}

/// Creates a tool: an already-bundled ESM module plus its manifest, or a
/// manifest of `kind: http` describing the request the server makes.
#[utoipa::path(post, path = "/accounts/me/tools", tag = "tools",
    security(("bearer" = [])),
    request_body(content(
        (CreateToolJson = "application/json"),
        (CreateToolForm = "multipart/form-data"),
    )),
    responses(
        (status = 201, description = "Tool created", body = ToolView,
            headers(("location" = String, description = "URL of the new tool"))),
        (status = 400, description = "Malformed body, unknown or missing field", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 409, description = "Name already used in this account (`tool_name_taken`), or `effects` and `retry` a tool may not hold together (`tool_effects_conflict`: a `side_effect` tool may not try a call more than once)", body = ErrorBody),
        (status = 413, description = "Bundle or body over its limit", body = ErrorBody),
        (status = 415, description = "Unsupported content type", body = ErrorBody),
        (status = 422, description = "A field breaks a rule", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn create_tool(
    Account(account): Account,
    State(state): State<AppState>,
    req: Request,
) -> ApiResult<impl IntoResponse> {
    let upload = read_upload::<CreateToolJson>(req, &state).await?;
    let manifest = upload.manifest.ok_or_else(|| {
        crate::error::ApiError::bad_field("manifest", "the `manifest` part is required")
    })?;
    let manifest = validate_manifest(manifest, &state.settings().limits)?;
    if let Some(http) = &manifest.http {
        check_http_destination(&state, http).await?;
    }
    let body = match (manifest.http.clone(), upload.bundle) {
        (Some(_), Some(_)) => {
            return Err(ValidationError::new(
                "bundle",
                "an `http` tool has no bundle: the server makes its request",
            )
            .into())
        }
        (Some(http), None) => ToolBody::Http(Box::new(http)),
        (None, Some(bundle)) => {
            let stored = state.bundles().put(bundle).await?;
            tracing::info!(bundle.sha256 = %stored.sha256, bundle.newly_stored = stored.newly_stored, "bundle stored");
            ToolBody::Bundle {
                sha256: stored.sha256,
                size: stored.size as i64,
            }
        }
        (None, None) => {
            return Err(ApiError::bad_field(
                "bundle",
                "the `bundle` part is required (or send `kind: http` with its `http` request)",
            ))
        }
    };
    let record = tools::insert(state.pool(), &account, manifest.into_new_tool(body)).await?;
    tracing::info!(tool.id = %record.id, tool.kind = record.body.kind(), "tool created");
    let location = format!("/accounts/me/tools/{}", record.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(ToolView::from(record)),
    ))
}

/// The 409 of effects and a retry policy `refused` as a pair; `advice`
/// says what to send instead.
pub fn effects_conflict(refused: &ValidationError, advice: &str) -> ApiError {
    ApiError::Conflict {
        code: "tool_effects_conflict",
        message: format!("{}: {}; {advice}", refused.field, refused.message),
    }
}
