//! The `tools` table: account tool manifests and what each runs (a bundle,
//! or an HTTP request).

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use time::OffsetDateTime;
use toolserver_domain::http_tool::HttpTool;
use toolserver_domain::{
    AccountId, EgressAllowList, InputSchema, RetrySpec, Sha256Digest, ToolConfig, ToolDescription,
    ToolEffects, ToolId, ToolName,
};
use uuid::Uuid;

use crate::{accounts, StoreError};

/// The channel every change to a stored tool (update or delete, cascades
/// included) notifies with the tool's id, from a trigger on `tools`.
pub const CHANGED_CHANNEL: &str = "toolserver_tools";

/// A stored tool as read back from the database.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRecord {
    /// The tool's public id.
    pub id: ToolId,
    /// Model-facing name, unique within the account.
    pub name: String,
    /// Model-facing description.
    pub description: String,
    /// JSON Schema of the tool's input.
    pub input_schema: InputSchema,
    /// Configuration that per-agent options merge over.
    pub default_config: ToolConfig,
    /// The hosts its code may reach; `None`: any public host.
    pub egress_allow: Option<EgressAllowList>,
    /// What a call does to the world (`side_effect` unless declared).
    pub effects: ToolEffects,
    /// The `retry` its manifest declares (see [`RetrySpec::policy`]).
    pub retry: RetrySpec,
    /// What a call runs: a bundle or an HTTP request.
    pub body: ToolBody,
    /// The OAuth provider whose end-user connection calls act through.
    pub connection: Option<String>,
    /// Starts at 1; every update adds one.
    pub version: i32,
    /// When the tool was uploaded.
    pub created_at: OffsetDateTime,
    /// When the tool last changed.
    pub updated_at: OffsetDateTime,
}

/// A validated tool to insert.
#[derive(Debug, Clone)]
pub struct NewTool {
    /// Model-facing name.
    pub name: ToolName,
    /// Model-facing description.
    pub description: ToolDescription,
    /// JSON Schema of the input.
    pub input_schema: InputSchema,
    /// Default configuration.
    pub default_config: ToolConfig,
    /// Egress allow list; `None`: any public host.
    pub egress_allow: Option<EgressAllowList>,
    /// What a call does to the world.
    pub effects: ToolEffects,
    /// The declared retry policy (checked against `effects`).
    pub retry: RetrySpec,
    /// What a call runs.
    pub body: ToolBody,
    /// The OAuth provider whose end-user connection calls act through.
    pub connection: Option<String>,
}

/// What a tool's call runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolBody {
    /// Uploaded code, run on the tool's runner.
    Bundle {
        /// Content address of the bundle.
        sha256: Sha256Digest,
        /// Its size in bytes.
        size: i64,
    },
    /// One HTTP request the server makes itself.
    Http(Box<HttpTool>),
}

impl ToolBody {
    /// `bundle` or `http`, as the `kind` column and the API spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Bundle { .. } => "bundle",
            Self::Http(_) => "http",
        }
    }

    /// The bundle's content address, for a bundle tool.
    pub fn bundle_sha256(&self) -> Option<&Sha256Digest> {
        match self {
            Self::Bundle { sha256, .. } => Some(sha256),
            Self::Http(_) => None,
        }
    }

    /// The columns that hold it: kind, bundle digest and size, HTTP spec.
    fn columns(&self) -> (&'static str, Option<String>, Option<i64>, Option<Value>) {
        match self {
            Self::Bundle { sha256, size } => ("bundle", Some(sha256.to_hex()), Some(*size), None),
            Self::Http(tool) => ("http", None, None, serde_json::to_value(tool.spec()).ok()),
        }
    }
}

/// Validated changes to a tool; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct ToolPatch {
    /// New model-facing name.
    pub name: Option<ToolName>,
    /// New description.
    pub description: Option<ToolDescription>,
    /// New input schema.
    pub input_schema: Option<InputSchema>,
    /// New default configuration (replaces the old one whole).
    pub default_config: Option<ToolConfig>,
    /// New egress allow list (`Some(None)` lifts it).
    pub egress_allow: Option<Option<EgressAllowList>>,
    /// New effects.
    pub effects: Option<ToolEffects>,
    /// New declared retry policy (replaces the old one whole).
    pub retry: Option<RetrySpec>,
    /// New body (a new bundle, or a new HTTP request).
    pub body: Option<ToolBody>,
    /// New connection (`Some(None)`: none).
    pub connection: Option<Option<String>>,
}

#[derive(FromRow)]
struct ToolRow {
    id: Uuid,
    name: String,
    description: String,
    input_schema: Value,
    default_config: Value,
    egress_allow: Option<Vec<String>>,
    effects: String,
    retry_max_attempts: Option<i32>,
    retry_initial_backoff_ms: Option<i32>,
    retry_max_backoff_ms: Option<i32>,
    kind: String,
    bundle_sha256: Option<String>,
    bundle_size: Option<i64>,
    http_spec: Option<Value>,
    connection: Option<String>,
    version: i32,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

const COLUMNS: &str = "id, name, description, input_schema, default_config, egress_allow, \
                       effects, retry_max_attempts, retry_initial_backoff_ms, \
                       retry_max_backoff_ms, kind, bundle_sha256, bundle_size, http_spec, connection, \
                       version, created_at, updated_at";

impl TryFrom<ToolRow> for ToolRecord {
    type Error = StoreError;

    fn try_from(row: ToolRow) -> Result<Self, StoreError> {
        let corrupt = |what: &str| {
            StoreError::Other(sqlx::Error::Decode(
                format!("tool {}: stored {what} is malformed", row.id).into(),
            ))
        };
        let body = match (
            row.kind.as_str(),
            row.bundle_sha256,
            row.bundle_size,
            row.http_spec,
        ) {
            ("bundle", Some(sha256), Some(size), None) => ToolBody::Bundle {
                sha256: Sha256Digest::parse(&sha256).map_err(|_| corrupt("bundle_sha256"))?,
                size,
            },
            ("http", None, None, Some(spec)) => {
                let spec = serde_json::from_value(spec).map_err(|_| corrupt("http_spec"))?;
                ToolBody::Http(Box::new(
                    HttpTool::parse(spec).map_err(|_| corrupt("http_spec"))?,
                ))
            }
            _ => return Err(corrupt("kind")),
        };
        let default_config = match row.default_config {
            Value::Object(map) => ToolConfig::from_stored(map),
            _ => return Err(corrupt("default_config")),
        };
        let egress_allow = row
            .egress_allow
            .map(|patterns| EgressAllowList::parse(&patterns))
            .transpose()
            .map_err(|_| corrupt("egress_allow"))?;
        let effects =
            ToolEffects::parse("effects", &row.effects).map_err(|_| corrupt("effects"))?;
        Ok(Self {
            id: ToolId::from_uuid(row.id),
            name: row.name,
            description: row.description,
            input_schema: InputSchema::from_stored(row.input_schema),
            default_config,
            egress_allow,
            effects,
            retry: RetrySpec::from_stored(
                row.retry_max_attempts,
                row.retry_initial_backoff_ms,
                row.retry_max_backoff_ms,
            ),
            body,
            connection: row.connection,
            version: row.version,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// Inserts a tool for `account`, creating the account row on its first write.
/// A name already used in the account fails with `Conflict { tools_account_name_key }`.
#[tracing::instrument(skip(pool, tool), fields(account.id = %account, tool.name = tool.name.as_str()))]
pub async fn insert(
    pool: &PgPool,
    account: &AccountId,
    tool: NewTool,
) -> Result<ToolRecord, StoreError> {
    let (kind, sha256, size, http_spec) = tool.body.columns();
    let mut tx = pool.begin().await?;
    accounts::ensure(&mut *tx, account).await?;
    let row: ToolRow = sqlx::query_as(&format!(
        "INSERT INTO tools (id, account_id, name, description, input_schema, default_config, \
                            bundle_sha256, bundle_size, egress_allow, effects, \
                            retry_max_attempts, retry_initial_backoff_ms, retry_max_backoff_ms, \
                            kind, http_spec, connection) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
         RETURNING {COLUMNS}"
    ))
    .bind(ToolId::generate().as_uuid())
    .bind(account.as_str())
    .bind(tool.name.as_str())
    .bind(tool.description.as_str())
    .bind(tool.input_schema.as_value())
    .bind(tool.default_config.to_value())
    .bind(sha256)
    .bind(size)
    .bind(tool.egress_allow.as_ref().map(EgressAllowList::patterns))
    .bind(tool.effects.as_str())
    .bind(stored_count(tool.retry.max_attempts()))
    .bind(stored_count(tool.retry.initial_backoff_ms()))
    .bind(stored_count(tool.retry.max_backoff_ms()))
    .bind(kind)
    .bind(http_spec)
    .bind(tool.connection.as_deref())
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    row.try_into()
}

/// Reads one of `account`'s tools.
#[tracing::instrument(skip(pool), fields(account.id = %account, tool.id = %id))]
pub async fn get(pool: &PgPool, account: &AccountId, id: ToolId) -> Result<ToolRecord, StoreError> {
    let row: ToolRow = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM tools WHERE account_id = $1 AND id = $2"
    ))
    .bind(account.as_str())
    .bind(id.as_uuid())
    .fetch_one(pool)
    .await?;
    row.try_into()
}

/// One page of `account`'s tools in creation order, starting after `after`.
/// Returns up to `limit` tools and whether more follow.
#[tracing::instrument(skip(pool), fields(account.id = %account))]
pub async fn list(
    pool: &PgPool,
    account: &AccountId,
    after: Option<ToolId>,
    limit: u32,
) -> Result<(Vec<ToolRecord>, bool), StoreError> {
    let rows: Vec<ToolRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM tools \
         WHERE account_id = $1 AND ($2::uuid IS NULL OR id > $2) \
         ORDER BY id LIMIT $3"
    ))
    .bind(account.as_str())
    .bind(after.map(|id| id.as_uuid()))
    .bind(i64::from(limit) + 1)
    .fetch_all(pool)
    .await?;
    let has_more = rows.len() > limit as usize;
    let tools = rows
        .into_iter()
        .take(limit as usize)
        .map(ToolRecord::try_from)
        .collect::<Result<_, _>>()?;
    Ok((tools, has_more))
}

/// Reads one of `account`'s tools by its name.
pub async fn get_by_name(
    pool: &PgPool,
    account: &AccountId,
    name: &str,
) -> Result<ToolRecord, StoreError> {
    let row: ToolRow = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM tools WHERE account_id = $1 AND name = $2"
    ))
    .bind(account.as_str())
    .bind(name)
    .fetch_one(pool)
    .await?;
    ToolRecord::try_from(row)
}

/// Applies `patch` to one of `account`'s tools in a single statement and bumps its version.
#[tracing::instrument(skip(pool, patch), fields(account.id = %account, tool.id = %id))]
pub async fn update(
    pool: &PgPool,
    account: &AccountId,
    id: ToolId,
    patch: ToolPatch,
) -> Result<ToolRecord, StoreError> {
    let (kind, sha, size, http_spec) = match &patch.body {
        Some(body) => {
            let (kind, sha, size, spec) = body.columns();
            (Some(kind), sha, size, spec)
        }
        None => (None, None, None, None),
    };
    let row: ToolRow = sqlx::query_as(&format!(
        "UPDATE tools SET \
             name = COALESCE($3, name), \
             description = COALESCE($4, description), \
             input_schema = COALESCE($5, input_schema), \
             default_config = COALESCE($6, default_config), \
             kind = COALESCE($16, kind), \
             bundle_sha256 = CASE WHEN $16 IS NULL THEN bundle_sha256 ELSE $7 END, \
             bundle_size = CASE WHEN $16 IS NULL THEN bundle_size ELSE $8 END, \
             http_spec = CASE WHEN $16 IS NULL THEN http_spec ELSE $17 END, \
             connection = CASE WHEN $18 THEN $19 ELSE connection END, \
             egress_allow = CASE WHEN $9 THEN $10 ELSE egress_allow END, \
             effects = COALESCE($11, effects), \
             retry_max_attempts = CASE WHEN $12 THEN $13 ELSE retry_max_attempts END, \
             retry_initial_backoff_ms = CASE WHEN $12 THEN $14 ELSE retry_initial_backoff_ms END, \
             retry_max_backoff_ms = CASE WHEN $12 THEN $15 ELSE retry_max_backoff_ms END, \
             version = version + 1, \
             updated_at = now() \
         WHERE account_id = $1 AND id = $2 RETURNING {COLUMNS}"
    ))
    .bind(account.as_str())
    .bind(id.as_uuid())
    .bind(patch.name.as_ref().map(ToolName::as_str))
    .bind(patch.description.as_ref().map(ToolDescription::as_str))
    .bind(patch.input_schema.as_ref().map(InputSchema::as_value))
    .bind(patch.default_config.as_ref().map(ToolConfig::to_value))
    .bind(sha)
    .bind(size)
    .bind(patch.egress_allow.is_some())
    .bind(
        patch
            .egress_allow
            .as_ref()
            .and_then(|allow| allow.as_ref().map(EgressAllowList::patterns)),
    )
    .bind(patch.effects.map(ToolEffects::as_str))
    .bind(patch.retry.is_some())
    .bind(
        patch
            .retry
            .and_then(|retry| stored_count(retry.max_attempts())),
    )
    .bind(
        patch
            .retry
            .and_then(|retry| stored_count(retry.initial_backoff_ms())),
    )
    .bind(
        patch
            .retry
            .and_then(|retry| stored_count(retry.max_backoff_ms())),
    )
    .bind(kind)
    .bind(http_spec)
    .bind(patch.connection.is_some())
    .bind(patch.connection.flatten())
    .fetch_one(pool)
    .await?;
    row.try_into()
}

/// A declared retry field as its `INTEGER` column holds it (every bound
/// of [`RetrySpec`] fits).
fn stored_count(value: Option<u32>) -> Option<i32> {
    value.and_then(|value| i32::try_from(value).ok())
}

/// Deletes one of `account`'s tools.
#[tracing::instrument(skip(pool), fields(account.id = %account, tool.id = %id))]
pub async fn delete(pool: &PgPool, account: &AccountId, id: ToolId) -> Result<(), StoreError> {
    let done = sqlx::query("DELETE FROM tools WHERE account_id = $1 AND id = $2")
        .bind(account.as_str())
        .bind(id.as_uuid())
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}
