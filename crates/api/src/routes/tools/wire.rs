//! Request and response bodies of the tool routes, in their wire spelling.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use toolserver_domain::http_tool::HttpRequestSpec;
use toolserver_domain::{RetryPolicy, ToolEffects};
use toolserver_store::{ToolBody, ToolRecord};
use utoipa::ToSchema;

/// A tool as the API shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolView {
    /// Stable id, `tool_` + 32 hex characters.
    pub tool_id: String,
    /// Model-facing name, unique in the account.
    pub name: String,
    /// Model-facing description.
    pub description: String,
    /// JSON Schema of the input (an object schema).
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// Configuration that agent options merge over.
    #[schema(value_type = Object)]
    pub default_config: Value,
    /// Where the tool's code may connect.
    pub egress: ToolEgress,
    /// What a call does to the world (`side_effect` unless declared).
    pub effects: EffectsView,
    /// The retry policy in force: the declared `retry`, defaults for the
    /// rest (one attempt for a `side_effect` tool).
    pub retry: RetryView,
    /// What a call runs: `bundle` (code) or `http` (a request).
    pub kind: ToolKind,
    /// SHA-256 of the current bundle (hex); bundle tools only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_sha256: Option<String>,
    /// Size of the current bundle in bytes; bundle tools only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_size: Option<i64>,
    /// The request an `http` tool makes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpRequestSpec>,
    /// The OAuth provider whose end-user connection calls act through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    /// 1 on upload, plus one per update.
    pub version: i32,
    /// Upload time (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// Last change (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

impl From<ToolRecord> for ToolView {
    fn from(tool: ToolRecord) -> Self {
        let retry = tool.retry.policy(tool.effects);
        Self {
            tool_id: tool.id.to_string(),
            name: tool.name,
            description: tool.description,
            input_schema: tool.input_schema.as_value().clone(),
            default_config: tool.default_config.to_value(),
            egress: ToolEgress {
                allow: tool.egress_allow.map(|allow| allow.patterns().to_vec()),
            },
            effects: tool.effects.into(),
            retry: retry.into(),
            kind: ToolKind::of(&tool.body),
            bundle_sha256: tool.body.bundle_sha256().map(|sha| sha.to_hex()),
            bundle_size: match &tool.body {
                ToolBody::Bundle { size, .. } => Some(*size),
                ToolBody::Http(_) => None,
            },
            http: match tool.body {
                ToolBody::Http(http) => Some(http.spec().clone()),
                ToolBody::Bundle { .. } => None,
            },
            connection: tool.connection,
            version: tool.version,
            created_at: tool.created_at,
            updated_at: tool.updated_at,
        }
    }
}

/// What a tool's call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Uploaded code, run on the tool's runner.
    Bundle,
    /// One HTTP request, made by the server.
    Http,
}

impl ToolKind {
    /// The kind of `body`.
    pub fn of(body: &ToolBody) -> Self {
        match body {
            ToolBody::Bundle { .. } => Self::Bundle,
            ToolBody::Http(_) => Self::Http,
        }
    }
}

/// What calling a tool does to the world, least cautious first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = ToolEffects)]
pub enum EffectsView {
    /// Reads only: calling it any number of times changes nothing.
    Read,
    /// Calling it again with the same input changes nothing more.
    Idempotent,
    /// Each call may change something anew.
    SideEffect,
}

impl From<ToolEffects> for EffectsView {
    fn from(effects: ToolEffects) -> Self {
        match effects {
            ToolEffects::Read => Self::Read,
            ToolEffects::Idempotent => Self::Idempotent,
            ToolEffects::SideEffect => Self::SideEffect,
        }
    }
}

/// A retry policy: most tries of a call (the first included) and the
/// waits between them, which grow from `initialBackoffMs` to `maxBackoffMs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryView {
    /// Most tries of one call, 1 to 10.
    pub max_attempts: u32,
    /// The wait before the second try, in milliseconds.
    pub initial_backoff_ms: u64,
    /// The longest wait between two tries, in milliseconds.
    pub max_backoff_ms: u64,
}

impl From<RetryPolicy> for RetryView {
    fn from(policy: RetryPolicy) -> Self {
        let ms = |wait: std::time::Duration| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        Self {
            max_attempts: policy.max_attempts,
            initial_backoff_ms: ms(policy.initial_backoff),
            max_backoff_ms: ms(policy.max_backoff),
        }
    }
}

/// Where a tool's code may connect.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolEgress {
    /// Host names (`api.example.com`) or `*.` patterns (`*.example.com`:
    /// any host below it) the code may reach, at most 64; the server's own
    /// callbacks stay reachable. Absent: any public host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
}

/// The manifest of a tool: everything but its code.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolManifest {
    /// Model-facing name: 1-64 letters, digits, `_` or `-`.
    pub name: String,
    /// Model-facing description.
    pub description: String,
    /// JSON Schema of the input; must compile and have `"type": "object"`.
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// Default configuration object.
    #[schema(value_type = Option<Object>)]
    pub default_config: Option<Value>,
    /// Where the tool's code may connect: `{"allow": [...]}` narrows it to
    /// those hosts; absent or `{}`: any public host.
    pub egress: Option<ToolEgress>,
    /// What a call does to the world: `read`, `idempotent` or
    /// `side_effect` (the default).
    #[schema(value_type = Option<EffectsView>)]
    pub effects: Option<String>,
    /// How a call that failed for a transient reason may be tried again;
    /// each field left out takes its default (3 attempts for `read` and
    /// `idempotent` tools, 1 for `side_effect` ones).
    #[schema(value_type = Option<RetryView>)]
    pub retry: Option<Value>,
    /// `bundle` (the default: code run on the tool's runner) or `http`
    /// (one HTTP request the server makes, described by `http`).
    #[schema(value_type = Option<ToolKind>)]
    pub kind: Option<String>,
    /// The OAuth provider whose end-user connection the tool acts through
    /// (see docs/connections.md): a bundle tool's `ctx.fetch` may then
    /// fill `{{connection.NAME.access_token}}`; an `http` tool's templates
    /// name it already (when sent, it must be the one they name). A turn
    /// asks its end user to authorize it before a call runs.
    pub connection: Option<String>,
    /// The request of an `http` tool.
    pub http: Option<HttpRequestSpec>,
}

/// Upload as JSON: the manifest plus the bundle in base64 (or, for an
/// `http` tool, its request and no bundle).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateToolJson {
    /// Model-facing name: 1-64 letters, digits, `_` or `-`.
    pub name: String,
    /// Model-facing description.
    pub description: String,
    /// JSON Schema of the input; must compile and have `"type": "object"`.
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// Default configuration object.
    #[schema(value_type = Option<Object>)]
    pub default_config: Option<Value>,
    /// Where the tool's code may connect: `{"allow": [...]}` narrows it to
    /// those hosts; absent or `{}`: any public host.
    pub egress: Option<ToolEgress>,
    /// What a call does to the world: `read`, `idempotent` or
    /// `side_effect` (the default).
    #[schema(value_type = Option<EffectsView>)]
    pub effects: Option<String>,
    /// How a call that failed for a transient reason may be tried again;
    /// each field left out takes its default (3 attempts for `read` and
    /// `idempotent` tools, 1 for `side_effect` ones).
    #[schema(value_type = Option<RetryView>)]
    pub retry: Option<Value>,
    /// `bundle` (the default: code run on the tool's runner) or `http`
    /// (one HTTP request the server makes, described by `http`).
    #[schema(value_type = Option<ToolKind>)]
    pub kind: Option<String>,
    /// The OAuth provider whose end-user connection the tool acts through
    /// (see docs/connections.md): a bundle tool's `ctx.fetch` may then
    /// fill `{{connection.NAME.access_token}}`; an `http` tool's templates
    /// name it already (when sent, it must be the one they name). A turn
    /// asks its end user to authorize it before a call runs.
    pub connection: Option<String>,
    /// The request of an `http` tool.
    pub http: Option<HttpRequestSpec>,
    /// The bundled ESM module, base64 (standard alphabet, padded); not
    /// sent for an `http` tool.
    pub bundle: Option<String>,
}

/// Upload as `multipart/form-data`.
#[derive(Debug, ToSchema)]
pub struct CreateToolForm {
    /// JSON text of a [`ToolManifest`].
    #[schema(value_type = String, content_media_type = "application/json")]
    pub manifest: String,
    /// The bundled ESM module.
    #[schema(value_type = String, format = Binary)]
    pub bundle: Vec<u8>,
}

/// Changes as JSON; omitted fields stay as they are.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateToolJson {
    /// New model-facing name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New input schema.
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
    /// New default configuration (replaces the old one whole).
    #[schema(value_type = Option<Object>)]
    pub default_config: Option<Value>,
    /// New egress rule (replaces the old one; `{}` lifts the allow list).
    pub egress: Option<ToolEgress>,
    /// New effects.
    #[schema(value_type = Option<EffectsView>)]
    pub effects: Option<String>,
    /// New retry policy (replaces the declared one whole).
    #[schema(value_type = Option<RetryView>)]
    pub retry: Option<Value>,
    /// New connection (bundle tools; an `http` tool's follows its request).
    pub connection: Option<String>,
    /// New request of an `http` tool (replaces the old one whole).
    pub http: Option<HttpRequestSpec>,
    /// New bundle, base64 (bundle tools).
    pub bundle: Option<String>,
}

/// Changes as `multipart/form-data`: an optional `manifest` part holding
/// [`UpdateToolJson`] fields (without `bundle`) and an optional `bundle` part.
#[derive(Debug, ToSchema)]
pub struct UpdateToolForm {
    /// JSON text of the changed manifest fields.
    #[schema(value_type = Option<String>, content_media_type = "application/json")]
    pub manifest: Option<String>,
    /// The new bundled ESM module.
    #[schema(value_type = Option<String>, format = Binary)]
    pub bundle: Option<Vec<u8>>,
}

/// One page of tools.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolPage {
    /// Tools in creation order.
    pub tools: Vec<ToolView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A short-lived download link for a tool's bundle.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleUrlView {
    /// GET this URL (no token needed) until it expires.
    pub url: String,
    /// When the link stops working (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
    /// SHA-256 of the bundle the link serves.
    pub bundle_sha256: String,
}

/// The manifest fields of an update, as found in a multipart `manifest` part.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateManifest {
    /// New model-facing name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New input schema.
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
    /// New default configuration.
    #[schema(value_type = Option<Object>)]
    pub default_config: Option<Value>,
    /// New egress rule (replaces the old one; `{}` lifts the allow list).
    pub egress: Option<ToolEgress>,
    /// New effects.
    #[schema(value_type = Option<EffectsView>)]
    pub effects: Option<String>,
    /// New retry policy (replaces the declared one whole).
    #[schema(value_type = Option<RetryView>)]
    pub retry: Option<Value>,
    /// New connection (bundle tools; an `http` tool's follows its request).
    pub connection: Option<String>,
    /// New request of an `http` tool (replaces the old one whole).
    pub http: Option<HttpRequestSpec>,
}
