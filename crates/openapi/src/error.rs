//! The document-level refusals: documents that are not OpenAPI 3.0 or 3.1,
//! and invalid options.

use serde_json::{Map, Value};

/// Why a whole document (or the options given with it) cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The document is not a JSON object.
    #[error("the document is not an object; expected an OpenAPI 3.0 or 3.1 document")]
    NotAnObject,
    /// The document is a Swagger (OpenAPI 2.0) document.
    #[error("this is a Swagger {0} document; only OpenAPI 3.0 and 3.1 are supported (convert it to OpenAPI 3 first)")]
    Swagger(String),
    /// The document has no string `openapi` field.
    #[error(
        "the document has no \"openapi\" version field; only OpenAPI 3.0 and 3.1 are supported"
    )]
    MissingVersion,
    /// The `openapi` field names a version other than 3.0.x or 3.1.x.
    #[error("OpenAPI version {0} is not supported; only 3.0.x and 3.1.x are")]
    UnsupportedVersion(String),
    /// The document has no `paths` object.
    #[error("the document has no \"paths\" object, so it has no operations to import")]
    MissingPaths,
    /// An import option is invalid.
    #[error("option {option} {reason}")]
    InvalidOption {
        /// The option's wire name, e.g. `baseUrl`.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Checks the document's version and returns whether it is OpenAPI 3.0
/// (whose schema dialect needs rewriting) and its `paths` object.
pub(crate) fn check_document(
    document: &Value,
) -> Result<(bool, &Map<String, Value>), DocumentError> {
    let root = document.as_object().ok_or(DocumentError::NotAnObject)?;
    if let Some(swagger) = root.get("swagger") {
        let version = swagger
            .as_str()
            .map_or_else(|| swagger.to_string(), str::to_owned);
        return Err(DocumentError::Swagger(version));
    }
    let version = root
        .get("openapi")
        .and_then(Value::as_str)
        .ok_or(DocumentError::MissingVersion)?;
    let legacy = match version.split('.').take(2).collect::<Vec<_>>()[..] {
        ["3", "0"] => true,
        ["3", "1"] => false,
        _ => return Err(DocumentError::UnsupportedVersion(version.to_owned())),
    };
    let paths = root
        .get("paths")
        .and_then(Value::as_object)
        .ok_or(DocumentError::MissingPaths)?;
    Ok((legacy, paths))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn refuses_documents_that_are_not_openapi_3() {
        let cases = [
            (json!([]), DocumentError::NotAnObject),
            (
                json!({"swagger": "2.0", "paths": {}}),
                DocumentError::Swagger("2.0".into()),
            ),
            (json!({"paths": {}}), DocumentError::MissingVersion),
            (
                json!({"openapi": "3.2.0", "paths": {}}),
                DocumentError::UnsupportedVersion("3.2.0".into()),
            ),
            (json!({"openapi": "3.0.3"}), DocumentError::MissingPaths),
        ];
        for (document, expected) in cases {
            assert_eq!(
                check_document(&document).err(),
                Some(expected),
                "{document}"
            );
        }
        assert!(DocumentError::Swagger("2.0".into())
            .to_string()
            .contains("only OpenAPI 3.0 and 3.1"));
    }

    #[test]
    fn tells_3_0_from_3_1() {
        let legacy = |v: &str| check_document(&json!({"openapi": v, "paths": {}})).map(|r| r.0);
        assert_eq!(legacy("3.0.3"), Ok(true));
        assert_eq!(legacy("3.1.0"), Ok(false));
        assert!(legacy("3").is_err());
    }
}
