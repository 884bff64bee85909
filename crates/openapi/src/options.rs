//! What the caller chooses about an import, and the rules each choice obeys.

use serde::Deserialize;
use url::Url;

use crate::DocumentError;

/// The base URI of a document whose retrieval URL is not known: an absolute
/// URL that no real reference names, so relative `$id`s and `$ref`s in the
/// document resolve against each other alone.
const PLACEHOLDER_BASE: &str = "https://openapi.invalid/document";

/// Choices for one import; every field is optional.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportOptions {
    /// Prefix for every tool name (`{namespace}_{name}`): 1-32 of `[A-Za-z0-9_-]`.
    pub namespace: Option<String>,
    /// Absolute http(s) URL used instead of every server URL in the document.
    pub base_url: Option<String>,
    /// The URL the document was fetched from; relative server URLs resolve against it.
    pub source_url: Option<String>,
    /// Operations to import, each an `operationId` or `METHOD /path`; all when absent.
    pub operations: Option<Vec<String>>,
    /// Account secret (1-64 of `[A-Za-z0-9_]`) that fills bearer and API-key authentication.
    pub secret: Option<String>,
    /// OAuth provider (1-64 of `[A-Za-z0-9_-]`) whose token fills OAuth 2 and OpenID Connect authentication.
    pub connection: Option<String>,
}

impl ImportOptions {
    /// Checks every option, naming the first invalid one.
    pub(crate) fn validate(&self) -> Result<(), DocumentError> {
        check_word("namespace", self.namespace.as_deref(), 32, true)?;
        check_word("secret", self.secret.as_deref(), 64, false)?;
        check_word("connection", self.connection.as_deref(), 64, true)?;
        check_url("baseUrl", self.base_url.as_deref())?;
        check_url("sourceUrl", self.source_url.as_deref())?;
        Ok(())
    }

    /// The base URI of the document: [`ImportOptions::source_url`], or a
    /// placeholder when it is not given.
    pub(crate) fn document_base(&self) -> Result<Url, DocumentError> {
        let url = self.source_url.as_deref().unwrap_or(PLACEHOLDER_BASE);
        Url::parse(url).map_err(|_| DocumentError::InvalidOption {
            option: "sourceUrl",
            reason: "must be an absolute http(s) URL".into(),
        })
    }
}

fn check_word(
    option: &'static str,
    value: Option<&str>,
    max: usize,
    dash: bool,
) -> Result<(), DocumentError> {
    let Some(value) = value else {
        return Ok(());
    };
    let ok = (1..=max).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || (dash && b == b'-'));
    if ok {
        return Ok(());
    }
    let chars = if dash {
        "letters, digits, '_' or '-'"
    } else {
        "letters, digits or '_'"
    };
    Err(DocumentError::InvalidOption {
        option,
        reason: format!("must be 1-{max} characters of {chars}"),
    })
}

fn check_url(option: &'static str, value: Option<&str>) -> Result<(), DocumentError> {
    let Some(value) = value else {
        return Ok(());
    };
    let invalid = |reason: &str| DocumentError::InvalidOption {
        option,
        reason: reason.to_owned(),
    };
    let url = Url::parse(value).map_err(|_| invalid("must be an absolute http(s) URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid("must be an absolute http(s) URL"));
    }
    if value.contains(['{', '}']) {
        return Err(invalid("must not contain '{' or '}'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option_error(options: ImportOptions) -> Option<&'static str> {
        match options.validate() {
            Err(DocumentError::InvalidOption { option, .. }) => Some(option),
            _ => None,
        }
    }

    #[test]
    fn names_the_invalid_option() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(option_error(ImportOptions::default()), None);
        let valid = ImportOptions {
            namespace: some("pet-store_1"),
            base_url: some("https://api.example.com/v1"),
            source_url: some("http://example.com/openapi.json"),
            operations: None,
            secret: some("PETSTORE_TOKEN"),
            connection: some("git-hub"),
        };
        assert_eq!(option_error(valid.clone()), None);
        let cases = [
            (
                "namespace",
                ImportOptions {
                    namespace: some(&"n".repeat(33)),
                    ..valid.clone()
                },
            ),
            (
                "namespace",
                ImportOptions {
                    namespace: some(""),
                    ..valid.clone()
                },
            ),
            (
                "secret",
                ImportOptions {
                    secret: some("a-b"),
                    ..valid.clone()
                },
            ),
            (
                "connection",
                ImportOptions {
                    connection: some("a b"),
                    ..valid.clone()
                },
            ),
            (
                "baseUrl",
                ImportOptions {
                    base_url: some("/v1"),
                    ..valid.clone()
                },
            ),
            (
                "baseUrl",
                ImportOptions {
                    base_url: some("ftp://x.org"),
                    ..valid.clone()
                },
            ),
            (
                "sourceUrl",
                ImportOptions {
                    source_url: some("https://x.org/{v}"),
                    ..valid.clone()
                },
            ),
        ];
        for (option, options) in cases {
            assert_eq!(option_error(options), Some(option));
        }
    }
}
