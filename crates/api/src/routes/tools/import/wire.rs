//! The bodies of `POST /accounts/me/tools/import`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// What to import, and how.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportBody {
    /// The OpenAPI 3.0 or 3.1 document: an object, or its JSON or YAML
    /// text. Send this or `url`.
    pub document: Option<Value>,
    /// A public http(s) URL to fetch the document from; relative server
    /// URLs in it resolve against this.
    pub url: Option<String>,
    /// Prefix of every tool name (`{namespace}_{operation}`): 1-32 letters,
    /// digits, `_` or `-`.
    pub namespace: Option<String>,
    /// The API's base URL, used instead of the document's `servers`.
    pub base_url: Option<String>,
    /// The operations to import, each an `operationId` or `METHOD /path`;
    /// all of them when absent.
    pub operations: Option<Vec<String>>,
    /// The account secret that fills the document's bearer or API-key
    /// authentication (`{{secret.NAME}}`); none is sent when absent.
    pub secret: Option<String>,
    /// The OAuth provider whose end-user connection fills the document's
    /// OAuth 2 or OpenID Connect authentication
    /// (`Bearer {{connection.NAME.access_token}}`); without it such
    /// operations are skipped.
    pub connection: Option<String>,
}

/// A tool an import created or updated.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportedTool {
    /// The operation, as `METHOD /path`.
    pub operation: String,
    /// Its `operationId`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// The tool's id.
    pub tool_id: String,
    /// The tool's name.
    pub name: String,
    /// What the conversion left out (e.g. authentication it cannot express).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// An operation that did not become a tool.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedOperationView {
    /// The operation, as `METHOD /path`.
    pub operation: String,
    /// Its `operationId`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// Why it was skipped.
    pub reason: String,
}

/// What an import did: every selected operation is in exactly one of
/// `created`, `updated` and `skipped`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportView {
    /// Tools that did not exist before.
    pub created: Vec<ImportedTool>,
    /// Tools of the same name that an earlier import made, updated in place.
    pub updated: Vec<ImportedTool>,
    /// Operations that did not become tools, each with its reason.
    pub skipped: Vec<SkippedOperationView>,
    /// Entries of `operations` that matched no operation.
    pub unmatched: Vec<String>,
}
