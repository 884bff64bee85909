//! The absolute URL an operation's path is appended to.

use serde_json::Value;
use url::Url;

use crate::ImportOptions;

/// The base URL (no trailing `/`) of an operation: the `baseUrl` option, or
/// the first server of the operation, its path item or the document (in that
/// order of precedence) with variables at their defaults, resolved against
/// `sourceUrl` when relative.
pub(crate) fn base_url(
    document: &Value,
    item: &Value,
    operation: &Value,
    options: &ImportOptions,
) -> Result<String, String> {
    if let Some(base) = &options.base_url {
        return Ok(base.trim_end_matches('/').to_owned());
    }
    let server = [operation, item, document]
        .into_iter()
        .find_map(|level| level.get("servers")?.as_array()?.first());
    let url = match server {
        Some(server) => expand(server)?,
        None => "/".to_owned(),
    };
    match Url::parse(&url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
            Ok(url.trim_end_matches('/').to_owned())
        }
        Ok(parsed) => Err(format!(
            "server URL {url:?} has scheme {:?}; only http and https are supported",
            parsed.scheme()
        )),
        Err(url::ParseError::RelativeUrlWithoutBase) => {
            let source = options
                .source_url
                .as_deref()
                .and_then(|source| Url::parse(source).ok())
                .ok_or("no absolute server URL; pass baseUrl")?;
            let joined = source
                .join(&url)
                .map_err(|err| format!("server URL {url:?} cannot be resolved: {err}"))?;
            Ok(joined.as_str().trim_end_matches('/').to_owned())
        }
        Err(err) => Err(format!("server URL {url:?} is invalid: {err}")),
    }
}

/// A server's URL with each `{variable}` replaced by its default.
fn expand(server: &Value) -> Result<String, String> {
    let template = server.get("url").and_then(Value::as_str).unwrap_or("/");
    let mut url = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        url.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("server URL {template:?} has an unclosed '{{'"))?;
        let name = &after[..end];
        let default = server
            .get("variables")
            .and_then(|vars| vars.get(name))
            .and_then(|var| var.get("default"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("server variable {name:?} has no default"))?;
        url.push_str(default);
        rest = &after[end + 1..];
    }
    url.push_str(rest);
    Ok(url)
}

/// `base` and an OpenAPI path joined with exactly one `/` between them.
pub(crate) fn join(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn options(base_url: Option<&str>, source_url: Option<&str>) -> ImportOptions {
        ImportOptions {
            base_url: base_url.map(str::to_owned),
            source_url: source_url.map(str::to_owned),
            ..ImportOptions::default()
        }
    }

    #[test]
    fn picks_the_most_specific_server_with_variable_defaults() {
        let document = json!({"servers": [{
            "url": "https://{region}.example.com/{version}/",
            "variables": {"region": {"default": "eu"}, "version": {"default": "v2"}},
        }]});
        let none = options(None, None);
        assert_eq!(
            base_url(&document, &json!({}), &json!({}), &none),
            Ok("https://eu.example.com/v2".into())
        );
        let item = json!({"servers": [{"url": "https://item.example.com"}]});
        assert_eq!(
            base_url(&document, &item, &json!({}), &none),
            Ok("https://item.example.com".into())
        );
        let op = json!({"servers": [{"url": "http://op.example.com/x"}]});
        assert_eq!(
            base_url(&document, &item, &op, &none),
            Ok("http://op.example.com/x".into())
        );
        let missing = json!({"servers": [{"url": "https://{tenant}.example.com"}]});
        assert!(base_url(&missing, &json!({}), &json!({}), &none)
            .unwrap_err()
            .contains("\"tenant\" has no default"));
    }

    #[test]
    fn resolves_relative_servers_against_base_or_source_url() {
        let document = json!({"servers": [{"url": "/api/v3"}]});
        let (item, op) = (json!({}), json!({}));
        assert_eq!(
            base_url(&document, &item, &op, &options(None, None)),
            Err("no absolute server URL; pass baseUrl".into())
        );
        assert_eq!(
            base_url(&json!({}), &item, &op, &options(None, None)),
            Err("no absolute server URL; pass baseUrl".into())
        );
        assert_eq!(
            base_url(
                &document,
                &item,
                &op,
                &options(None, Some("https://x.io/docs/openapi.json"))
            ),
            Ok("https://x.io/api/v3".into())
        );
        assert_eq!(
            base_url(
                &json!({"servers": [{"url": "v1"}]}),
                &item,
                &op,
                &options(None, Some("https://x.io/docs/openapi.json"))
            ),
            Ok("https://x.io/docs/v1".into())
        );
        assert_eq!(
            base_url(
                &document,
                &item,
                &op,
                &options(
                    Some("https://override.io/base/"),
                    Some("https://x.io/o.json")
                )
            ),
            Ok("https://override.io/base".into())
        );
        assert_eq!(
            join("https://x.io/api/", "/pet/{petId}"),
            "https://x.io/api/pet/{petId}"
        );
        assert_eq!(join("https://x.io", "/"), "https://x.io/");
    }
}
