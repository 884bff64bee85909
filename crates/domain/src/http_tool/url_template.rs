//! The URL of an HTTP tool: an RFC 6570 URI template (every level) whose
//! variables are the input's top-level properties. Its scheme and host are
//! written out, never filled from the input, so the destination is known
//! when the tool is saved.

use iri_string::spec::UriSpec;
use iri_string::template::context::{Context, Visitor};
use iri_string::template::UriTemplateString;
use serde_json::{Map, Value};
use url::Url;

use crate::ValidationError;

const FIELD: &str = "http.url";

/// A parsed URL template with a literal http(s) origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlTemplate {
    template: UriTemplateString,
    host: String,
}

impl UrlTemplate {
    /// Parses `source`: a URI template starting with `http://` or
    /// `https://` and a host that contains no template expression.
    pub fn parse(source: &str) -> Result<Self, ValidationError> {
        let template = UriTemplateString::try_from(source.to_owned()).map_err(|err| {
            ValidationError::new(FIELD, format!("is not an RFC 6570 URI template: {err}"))
        })?;
        let literal = source.split('{').next().unwrap_or_default();
        let origin_end = literal
            .find("://")
            .and_then(|at| {
                literal[at + 3..]
                    .find(['/', '?', '#'])
                    .map(|end| at + 3 + end)
            })
            .or_else(|| {
                let expression = source.get(literal.len()..)?;
                let operator_ok = literal.contains("://")
                    && (literal.len() == source.len()
                        || ["{/", "{?", "{#"].iter().any(|op| expression.starts_with(op)));
                operator_ok.then_some(literal.len())
            })
            .ok_or_else(|| {
                ValidationError::new(
                    FIELD,
                    "must start with http:// or https:// and a host written out (no `{…}` before the path)",
                )
            })?;
        let origin = Url::parse(&format!("{}/", &literal[..origin_end]))
            .map_err(|err| ValidationError::new(FIELD, format!("has no valid origin: {err}")))?;
        if !matches!(origin.scheme(), "http" | "https") {
            return Err(ValidationError::new(
                FIELD,
                format!("must use http or https, not {}", origin.scheme()),
            ));
        }
        if !origin.username().is_empty() || origin.password().is_some() {
            return Err(ValidationError::new(
                FIELD,
                "must not carry credentials; use a header with {{secret.NAME}}",
            ));
        }
        let host = origin
            .host_str()
            .ok_or_else(|| ValidationError::new(FIELD, "has no host"))?
            .to_owned();
        Ok(Self { template, host })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        self.template.as_str()
    }

    /// The host it names (what the egress allow list defaults to).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The written-out origin (scheme, host and port), as a URL.
    pub fn origin(&self) -> Result<Url, String> {
        let source = self.template.as_str();
        let after_scheme = source.find("://").map_or(0, |at| at + 3);
        let end = source[after_scheme..]
            .find(['/', '?', '#', '{'])
            .map_or(source.len(), |at| after_scheme + at);
        Url::parse(&format!("{}/", &source[..end])).map_err(|err| err.to_string())
    }

    /// The URL for `input`: absent and null properties are undefined;
    /// strings, numbers and booleans are values; arrays are lists and
    /// objects associative arrays of scalars.
    pub fn expand(&self, input: &Map<String, Value>) -> Result<Url, String> {
        let expanded = self
            .template
            .expand::<UriSpec, _>(&InputContext(input))
            .map_err(|err| format!("the URL template could not be expanded: {err}"))?
            .to_string();
        Url::parse(&expanded).map_err(|err| format!("the expanded URL is not valid: {err}"))
    }
}

/// The input as an RFC 6570 expansion context.
struct InputContext<'a>(&'a Map<String, Value>);

impl Context for InputContext<'_> {
    fn visit<V: Visitor>(&self, visitor: V) -> V::Result {
        let value = self.0.get(visitor.var_name().as_str());
        match value {
            None | Some(Value::Null) => visitor.visit_undefined(),
            Some(Value::Array(items)) => visitor.visit_list_direct(items.iter().filter_map(scalar)),
            Some(Value::Object(entries)) => visitor.visit_assoc_direct(
                entries
                    .iter()
                    .filter_map(|(key, value)| Some((key.as_str(), scalar(value)?))),
            ),
            Some(other) => match scalar(other) {
                Some(text) => visitor.visit_string(text),
                None => visitor.visit_undefined(),
            },
        }
    }
}

/// A scalar's text in a URL; `None` for null, arrays and objects.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn expand(template: &str, input: Value) -> String {
        let input = input.as_object().cloned().unwrap_or_default();
        UrlTemplate::parse(template)
            .unwrap()
            .expand(&input)
            .unwrap()
            .to_string()
    }

    #[test]
    fn templates_expand_every_level() {
        assert_eq!(
            expand("https://api.test/pets/{petId}", json!({"petId": "a b/c"})),
            "https://api.test/pets/a%20b%2Fc"
        );
        assert_eq!(
            expand(
                "https://api.test/pets{?tags*,limit}",
                json!({"tags": ["x", "y"], "limit": 5})
            ),
            "https://api.test/pets?tags=x&tags=y&limit=5"
        );
        assert_eq!(
            expand("https://api.test{/path*}", json!({"path": ["a", "b"]})),
            "https://api.test/a/b"
        );
        assert_eq!(
            expand("https://api.test/pets{?limit}", json!({})),
            "https://api.test/pets"
        );
    }

    #[test]
    fn the_origin_is_written_out() {
        assert_eq!(
            UrlTemplate::parse("https://api.test:8443/x/{id}")
                .unwrap()
                .host(),
            "api.test"
        );
        assert_eq!(
            UrlTemplate::parse("http://127.0.0.1{/id}").unwrap().host(),
            "127.0.0.1"
        );
        assert_eq!(
            UrlTemplate::parse("https://api.test:8443/x/{id}")
                .unwrap()
                .origin()
                .unwrap()
                .as_str(),
            "https://api.test:8443/"
        );
        for bad in [
            "https://{host}/x",
            "https://api.{tld}/x",
            "ftp://api.test/x",
            "/relative/{id}",
            "https://user:pw@api.test/",
            "https://api.test/{unclosed",
        ] {
            assert!(UrlTemplate::parse(bad).is_err(), "{bad}");
        }
    }
}
