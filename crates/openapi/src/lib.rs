//! Converts an OpenAPI 3.0 or 3.1 document into HTTP-tool manifests: one
//! manifest per operation, and a reason for every operation that could not
//! become a tool. Pure: the document arrives parsed and nothing here performs
//! I/O.
//!
//! Output order does not depend on the map order of the parsed document:
//! paths are visited in lexicographic order and, within a path, methods in
//! the order get, put, post, delete, options, head, patch, trace.

mod body;
mod description;
mod error;
mod filter;
mod ids;
mod keywords;
mod names;
mod operation;
mod options;
mod parameters;
mod patterns;
mod refs;
mod schema;
mod security;
mod servers;

use serde::Serialize;
use serde_json::Value;

pub use error::DocumentError;
pub use options::ImportOptions;

use filter::Filter;
use ids::Ids;
use names::ToolNames;
use operation::{Context, Operation};

/// The methods of a path item that are operations, in output order.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The outcome of converting one document.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conversion {
    /// One entry per operation that became a tool manifest.
    pub created: Vec<ConvertedTool>,
    /// One entry per selected operation that could not become a tool.
    pub skipped: Vec<SkippedOperation>,
    /// Entries of [`ImportOptions::operations`] that matched no operation.
    pub unmatched: Vec<String>,
}

/// An operation converted into a tool manifest.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConvertedTool {
    /// The operation as `METHOD /path`, e.g. `GET /pet/{petId}`.
    pub operation: String,
    /// The operation's `operationId`, when it has one.
    pub operation_id: Option<String>,
    /// The manifest (`kind: "http"`), ready for the server's validation.
    pub manifest: Value,
    /// What the conversion left out, e.g. authentication it cannot express.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// An operation that could not become a tool, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedOperation {
    /// The operation as `METHOD /path`; a path alone when its whole path item
    /// could not be read.
    pub operation: String,
    /// The operation's `operationId`, when it has one.
    pub operation_id: Option<String>,
    /// A human-readable reason.
    pub reason: String,
}

/// Converts every operation of `document` (selected by
/// [`ImportOptions::operations`], when given) into a tool manifest.
///
/// Fails only when the document is not OpenAPI 3.0 or 3.1 or an option is
/// invalid; a single operation that cannot be converted is listed in
/// [`Conversion::skipped`] instead.
pub fn convert(document: &Value, options: &ImportOptions) -> Result<Conversion, DocumentError> {
    options.validate()?;
    let (legacy, paths) = error::check_document(document)?;
    let ids = Ids::new(document, legacy, options.document_base()?);
    let mut context = Context::new(document, legacy, options, ids);
    let mut filter = options.operations.as_deref().map(Filter::new);
    let mut names = ToolNames::new(options.namespace.as_deref());
    let mut conversion = Conversion::default();

    let mut sorted: Vec<(&String, &Value)> = paths
        .iter()
        .filter(|(path, _)| !path.starts_with("x-"))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    for (path, raw_item) in sorted {
        let item = match refs::inline(document, raw_item) {
            Ok(item) => item,
            Err(reason) => {
                if filter.as_mut().is_none_or(|f| f.selects_path(path)) {
                    conversion.skipped.push(SkippedOperation {
                        operation: path.clone(),
                        operation_id: None,
                        reason: format!("path item: {reason}"),
                    });
                }
                continue;
            }
        };
        for method in METHODS {
            let Some(raw_operation) = item.get(method) else {
                continue;
            };
            let label = format!("{} {path}", method.to_ascii_uppercase());
            let operation_id = raw_operation
                .get("operationId")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(filter) = filter.as_mut() {
                if !filter.selects(method, path, operation_id.as_deref()) {
                    continue;
                }
            }
            let operation = Operation {
                path,
                method,
                item,
                operation: raw_operation,
            };
            match context.build(&operation) {
                Ok(built) => {
                    let name = names.assign(operation_id.as_deref(), method, path);
                    let (manifest, notes) = built.named(name);
                    conversion.created.push(ConvertedTool {
                        operation: label,
                        operation_id,
                        manifest,
                        notes,
                    });
                }
                Err(reason) => conversion.skipped.push(SkippedOperation {
                    operation: label,
                    operation_id,
                    reason,
                }),
            }
        }
    }
    conversion.unmatched = filter.map(|f| f.unmatched()).unwrap_or_default();
    Ok(conversion)
}

#[cfg(test)]
mod tests;
